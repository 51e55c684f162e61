"""Process runtime: configuration, errors, logging, supervision, retries, running a process."""
