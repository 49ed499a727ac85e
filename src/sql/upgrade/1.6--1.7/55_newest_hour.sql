-- ---- counter.rollup_newest_hour goes (issue 22): the view counter.rollup_state
-- calls counter_internal.rollup_newest_hour now (50_code.sql made it, over
-- counter_internal.rollup_newest_hour_impl, and replaced the view).
DROP FUNCTION IF EXISTS counter.rollup_newest_hour(integer);
