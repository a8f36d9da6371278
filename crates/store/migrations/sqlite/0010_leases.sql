-- Leases: named, expiring, exclusive holds that replicas sharing this database take on what only
-- one of them may do at a time (a relayer account's nonces, the keeper, one webhook endpoint's
-- queue). `token` is the fencing token: it grows by one each time the lease changes hands (or is
-- taken again after it lapsed), never repeats, and a holder acts only under the token it was
-- given. `expires_at` is unix milliseconds on the database's clock, so replicas' clocks do not
-- matter; a released lease is expired, not deleted, so that its token keeps growing.
CREATE TABLE leases (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL CHECK (token >= 1),
    expires_at INTEGER NOT NULL CHECK (expires_at >= 0)
) STRICT;
