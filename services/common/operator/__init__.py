"""The operator surface: the admin listener's endpoints and readiness, above the adapters it checks."""
