"""Nexmark benchmark events: a seeded, vectorised generator of persons, auctions and bids.

See :mod:`lockgate.nexmark.generator`.
"""

from lockgate.nexmark.generator import (
    AUCTION_PROPORTION,
    AUCTION_SCHEMA,
    BID_PROPORTION,
    BID_SCHEMA,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    PERSON_PROPORTION,
    PERSON_SCHEMA,
    PROPORTION_DENOMINATOR,
    SCHEMAS,
    STREAMS,
    NexmarkConfig,
    generate,
    generate_all,
    last_base0_auction_id,
    last_base0_person_id,
    stream_event_numbers,
    write_parquet_windows,
)

__all__ = [
    "AUCTION_PROPORTION",
    "AUCTION_SCHEMA",
    "BID_PROPORTION",
    "BID_SCHEMA",
    "FIRST_AUCTION_ID",
    "FIRST_CATEGORY_ID",
    "FIRST_PERSON_ID",
    "PERSON_PROPORTION",
    "PERSON_SCHEMA",
    "PROPORTION_DENOMINATOR",
    "SCHEMAS",
    "STREAMS",
    "NexmarkConfig",
    "generate",
    "generate_all",
    "last_base0_auction_id",
    "last_base0_person_id",
    "stream_event_numbers",
    "write_parquet_windows",
]
