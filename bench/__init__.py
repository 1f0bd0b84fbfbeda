"""Lockgate's benchmark suite: Lockgate side by side with Spark Structured Streaming and a
plain PySpark batch job, on the same Nexmark data, in one run. Run it with
``python -m bench.run --size small|full --reps N`` (see ``bench/README.md``)."""
