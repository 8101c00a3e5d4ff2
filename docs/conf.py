"""Sphinx configuration of the provider's documentation site (``make docs`` builds it into docs/_build/html).

The pages are Markdown (MyST). The build runs with warnings as errors and nitpicky references, so a
link to a page or heading that does not exist fails it; links outside the site are not checked (CI has
no network).
"""

project = "airflow-delta-provider"
author = "airflow-delta-provider contributors"
copyright = "the airflow-delta-provider contributors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings get anchors (h1-h3) so that pages can link to a section: [text](page.md#a-heading).
# A link to an anchor that does not exist is a warning, hence an error in `make docs`.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "furo"
html_title = "airflow-delta-provider"
html_static_path: list[str] = []
