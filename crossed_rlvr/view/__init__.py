"""``crossed-view``: a run folder's crossed grid, each cell's responses and any two cells item by item, served
read-only on localhost (data.py reads the run, marks.py marks payloads, server.py serves, page.html shows)."""
