"""ssljax: self-supervised learning as losses over embeddings Z and similarity graphs G."""

# The release; pyproject.toml's `version` (tests/test_packaging.py checks
# that they agree).
__version__ = "0.2.0"
