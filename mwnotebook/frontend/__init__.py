"""frontend"""
