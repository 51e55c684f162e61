-- The W3C trace context (traceparent, tracestate) of the projector's span that wrote the post's
-- current version, so the stream and the dispatcher continue the producer's trace. NULL when
-- tracing was off, for rows written before, and for rows a rebuild loaded.
ALTER TABLE posts ADD COLUMN trace_parent text, ADD COLUMN trace_state text;
