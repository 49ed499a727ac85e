-- ---- counter.job_runs keeps a failed run's error whole: besides sqlstate
-- and message, its detail, hint and context (src/sql/05_jobs.sql).
ALTER TABLE counter.job_runs ADD COLUMN detail text, ADD COLUMN hint text, ADD COLUMN context text;
