"""ssljax: self-supervised learning as losses over embeddings Z and similarity graphs G."""
