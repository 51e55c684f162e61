"""HTTP plumbing shared by the partner listeners: the listener, the error envelope, the request log, headers, the query grammar, API keys."""
