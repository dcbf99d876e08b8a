"""The schema migrations, one ``.sql`` file each, applied in order by
``cluster.store.schema.migrate`` (docs/design/schema.md)."""
