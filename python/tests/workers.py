"""What multiprocessing's workers run in test_package.py (a module of its own, which spawned
workers can import)."""

_held = None


def hold(model):
    """A Pool initializer: keeps the model the worker was given (inherited as it is by a fork)."""
    global _held
    _held = model


def predict_with_held(text):
    return _held.predict([text])[0]


def predict_with(model_and_text):
    model, text = model_and_text
    return model.predict([text])[0]


def embed_with(embedder_and_text):
    embedder, text = embedder_and_text
    return embedder.embed([text])[0].tolist()
