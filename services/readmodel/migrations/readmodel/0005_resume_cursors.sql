-- Resume cursors (docs/resume.md): announcements are read back in log order after a cursor.
--
-- The identity of the log these announcement positions belong to: one row, a random token
-- (the cursor's epoch). A new read model gets a new one; `tickerwire projector accept-log`
-- replaces it when it accepts a log that does not continue the old one (a reset or
-- re-created posts topic), and a rebuild replaces it when its announcement positions differ
-- from the live ones. A cursor of another epoch is refused, never misread. ``starts``: the
-- partitions whose log was replaced when the epoch began, each with the position it began at
-- (a stream process moves its cursor marks of those partitions back to it).
CREATE TABLE log_epoch (
    single  boolean PRIMARY KEY DEFAULT true CHECK (single),
    epoch   text    NOT NULL,
    starts  jsonb   NOT NULL DEFAULT '{}'
);
INSERT INTO log_epoch (epoch) VALUES (substr(md5(random()::text || clock_timestamp()::text), 1, 12));

-- "Announcements after a cursor, in a locale": per locale and partition, in offset order. A
-- /changes page or a stream replay reads a short range of it per (locale, partition).
CREATE INDEX post_translations_announced ON post_translations (lower(lang), announced_partition, announced_offset)
    WHERE visible AND announced_offset IS NOT NULL;
