-- Posts are ordered and paged by (published_at, id), and partners see published_at to the
-- millisecond. Events now carry it to the millisecond (schemas/models.py, PublishedAt); rows
-- projected before kept the microseconds, which ordered two posts of one millisecond by a part
-- of the time no partner sees (and a client resuming after one of them could miss the other).
UPDATE posts SET published_at = date_trunc('milliseconds', published_at)
WHERE published_at <> date_trunc('milliseconds', published_at);
UPDATE post_translations SET published_at = date_trunc('milliseconds', published_at)
WHERE published_at <> date_trunc('milliseconds', published_at);
