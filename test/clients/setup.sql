-- What an application's migrations do before any client runs (the clients
-- register nothing themselves). Run as the tables' owner (here a superuser)
-- in a fresh database, after the roles exist:
--   clients_app     the application's login role: INSERT/SELECT on its tables
--   (no right on app.audit: its counter.add is refused, 42501)
CREATE EXTENSION counter_ext;
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO clients_app;

-- Trigger mode, bigint key: every INSERT counts, nothing to call.
CREATE TABLE app.comments (
    id         bigserial PRIMARY KEY,
    post_id    bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON app.comments (post_id, created_at);
SELECT counter.track('comments_per_post', 'app.comments', 'post_id', 'created_at');

-- Application mode, text key: the application calls counter.add in the
-- transaction that inserts the row.
CREATE TABLE app.likes (
    user_name text NOT NULL,
    liked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON app.likes (user_name, liked_at);
SELECT counter.track('likes_per_user', 'app.likes', 'user_name', 'liked_at', mode => 'application');

-- Application mode, uuid key.
CREATE TABLE app.downloads (
    file_id       uuid NOT NULL,
    downloaded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON app.downloads (file_id, downloaded_at);
SELECT counter.track('downloads_per_file', 'app.downloads', 'file_id', 'downloaded_at', mode => 'application');

-- A counter the application may not add to (no INSERT on its table).
CREATE TABLE app.audit (
    actor bigint NOT NULL,
    at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON app.audit (actor, at);
SELECT counter.track('audit_per_actor', 'app.audit', 'actor', 'at', mode => 'application');

-- An hourly rollup with a distinct count of visitors per link and hour.
CREATE TABLE app.clicks (
    event_id    uuid NOT NULL,
    link_id     bigint NOT NULL,
    visitor_id  bigint NOT NULL,
    occurred_at timestamptz NOT NULL,
    UNIQUE (event_id, occurred_at)
);
SELECT counter.rollup_create('clicks_hourly', 'app.clicks', 'occurred_at', '{link_id}', distinct_on => '{visitor_id}');

-- Sketches the application stores (counter.hll, sent in binary or text).
CREATE TABLE app.daily_visitors (
    day      date PRIMARY KEY,
    visitors counter.hll NOT NULL
);

GRANT SELECT, INSERT ON app.comments, app.likes, app.downloads, app.clicks, app.daily_visitors TO clients_app;
GRANT SELECT ON app.audit, app.clicks_hourly TO clients_app;
GRANT USAGE ON SEQUENCE app.comments_id_seq TO clients_app;
