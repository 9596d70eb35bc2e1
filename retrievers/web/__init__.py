"""The web as a retriever: search backends, the page reader, the record of a run, and a loopback web.

* :mod:`.search` — what every backend shares (key, HTTP client, retries, record, opening results);
  :mod:`.brave`, :mod:`.searxng`, :mod:`.serper` — one wire format each;
* :mod:`.pages` — a result's URL to its main text, under time, size, type, robots.txt and reach limits;
* :mod:`.record` — every search and page in one SQLite file: ``record``, ``replay`` (no API call), ``cached``;
* :mod:`.standin` — pages made from a corpus and the three search APIs over them, on 127.0.0.1.

docs/web.md is the user's guide.
"""
