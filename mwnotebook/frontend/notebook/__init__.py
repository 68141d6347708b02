"""The Jupyter front end: the magics, the cell's output areas, late output, the live chart's placement."""
