-- 0028_call_lease_epoch: every claim of a call is numbered (issue 33, fences).
--
-- The dispatcher increments lease_epoch each time it claims a call (pending -> sent),
-- so the first claim is epoch 1, a claim after a lapsed lease epoch 2, and so on. The
-- number is sent to the worker as `Strand-Lease-Epoch` (docs/definitions.md, calls),
-- and it fences the claim's holder in the database: a lease is renewed and a result
-- recorded only by the claim of the current epoch. 0 for a call never claimed (and for
-- the calls of an older executor, which sent no epoch).
ALTER TABLE strand.calls ADD COLUMN IF NOT EXISTS lease_epoch bigint NOT NULL DEFAULT 0;
