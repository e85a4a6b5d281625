"""Raw documents to packed, memory-mapped token shards, and the loader that serves them."""
