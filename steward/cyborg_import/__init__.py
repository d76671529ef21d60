"""`steward db import-cyborg`, a one-off migration from an upstream Cyborg: reading
its database (source), translating its rows (translation), writing Steward's
database through the database layer (importer) and adopting its Placement
providers through the Placement client it is handed (providers)."""
