"""The docs' tools without a build: the lesson pages' verdict on an executed lesson, the executed
lesson copies, the options rows from the parsers (the build itself: ``bash tools/docs.sh``).

Marker: (none).
Needs: the ``docs`` extra's tools.
"""
