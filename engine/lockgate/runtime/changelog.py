"""How an updating stream marks its rows (no Spark: the sinks' committers read it too).

An updating stream's row replaces the earlier row of its key; a row whose :data:`OP` column
says :data:`DELETE` removes its key instead. A stream that never deletes has no ``op`` column.
"""

#: the column of an updating stream that says what a row does to its key
OP = "op"
#: a row that deletes its key
DELETE = "-D"
#: a row that inserts or replaces its key's row
UPSERT = "+U"
