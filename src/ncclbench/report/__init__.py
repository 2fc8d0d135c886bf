"""Reports: self-contained HTML with plots (matplotlib or a built-in SVG
fallback), PNG export, and the terminal progress bar for long runs."""
