"""Every statement the read API runs. Plain SQL; the read-model schema is first on the search_path."""

SELECT_STAMPS = "SELECT name, stamp FROM change_stamps"

SELECT_LANGUAGES = """
SELECT code, name, native_name, country_code, direction, is_default
FROM locales
WHERE active AND web_channel
ORDER BY position, code
"""

# Newest first; the id breaks ties in published_at so the order is total.
SELECT_FEED = """
SELECT post_id, lean FROM post_translations
WHERE lang = $1 AND visible
ORDER BY published_at DESC, post_id DESC
LIMIT $2
"""
