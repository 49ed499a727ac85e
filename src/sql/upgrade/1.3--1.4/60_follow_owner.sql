-- A source given to another role: its counters, rollups and jobs follow
-- (counter_internal.follow_owner, 80_drop.sql; the tracked part moved there
-- from tracked_ddl; rollups and jobs did not follow in 1.3).
CREATE EVENT TRIGGER counter_follow_owner ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION counter_internal.follow_owner();
