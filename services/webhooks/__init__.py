"""The webhook dispatcher (docs/webhooks.md): delivers each workspace's ``post.created``
messages to its endpoints, from each endpoint's own resume cursor."""
