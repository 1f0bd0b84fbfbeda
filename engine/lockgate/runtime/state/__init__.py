"""Keyed state of a run's stateful operators.

- :mod:`.layers`: a state table as layers (a base and deltas) and what a round changed in it;
- :mod:`.warm`: the layers a run keeps in memory from one round to the next;
- :mod:`.compaction`: when a round folds a table's chain of deltas into a new base;
- :mod:`.driver_fold`: small folds made on the driver with pyarrow;
- :mod:`.key_ranges` and :mod:`.key_bounds`: what is known of a round's keys before it runs,
  which lets a lookup read only part of the layers.
"""
