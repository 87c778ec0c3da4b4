"""The row store: result rows, statuses, the row log, tallies and how numbers are stored.
"""
