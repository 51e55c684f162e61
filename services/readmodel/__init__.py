"""The read-model room: what more than one process knows about the read model's tables.

The projector writes the read model, the API and the stream read it, the CLI waits for it. The
rules they share live here, once each: the migrations (:mod:`.migrate`, SQL in ``migrations/``),
the projector's stored positions and "projected up to here" (:mod:`.positions`), the log
position partners see (:mod:`.logposition`), the listed locales that decide the default locale
(:mod:`.taxonomy`), the committed ``post.created`` announcements (:mod:`.announcements`), the
resume cursors over them (:mod:`.cursors`) and the one walk from a cursor (:mod:`.walk`), the
pure mapping from a post to its per-locale rows and their partner JSON (:mod:`.mapping`), the search text normalized alike for indexing and querying
(:mod:`.searchtext`), the access gates over the keys and workspaces with each process's in-memory copy of them
(:mod:`.access`), the change stamps with their watcher (:mod:`.stamps`), and each post's stored trace context
(:mod:`.post_traces`). SQL that only
one service runs stays in that service; connections and pools come from
:mod:`tickerwire.services.common.db`. This package imports ``schemas`` and ``services/common``
only; the services import it, never each other.
"""
