"""Static pictures of timelines (SVG) for saved notebooks and HTML reports."""
