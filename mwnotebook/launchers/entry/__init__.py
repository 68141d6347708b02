"""launchers/entry"""
