"""The card's Jinja templates and CSS, shipped as ``reporter.template_files``."""
