"""The database's shape: the migrations (``migrations/``, applied in order by ``migrate``;
``released.txt`` lists those each release shipped), ``schema.sql`` (the schema as the newest
migration leaves it) and the least-privilege roles nodes and ``pulse web`` log in through
(``roles``). Every other room of the store runs its statements against what this room
makes."""
