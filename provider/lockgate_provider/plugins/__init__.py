"""The Lockgate plugin for Airflow's UI: an API over the Lockgate client and pages in Airflow.

:mod:`.lockgate` is the plugin Airflow loads; :mod:`.api` its FastAPI app (routes behind
Airflow's auth manager); :mod:`.access` the auth dependencies; :mod:`.views` what the API
answers (jobs, timeline, task tries); :mod:`.audit` the record of every action.
"""
