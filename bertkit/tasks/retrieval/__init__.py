"""Retrieval and semantic similarity: reading retrieval sets (BEIR folders, pairs files), exact search over a
corpus of embeddings, and the ranking metrics retrieval is judged by. The task kinds that train and score
bi-encoders are bertkit/tasks/kinds/retrieval.py; their losses are bertkit/objectives/contrastive.py."""
