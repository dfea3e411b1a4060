"""``python -m reporter.schema`` prints the README's schema tables."""
from .tables import markdown

if __name__ == "__main__":  # pragma: no cover
    print(markdown(), end="")
