// The spine of periodic work: one registry of kinds, one loop (src/spine.cpp).
//
// A kind of periodic work is one row of counter_internal.job_kinds naming
// its step function, of one signature:
//
//     step(target text, args jsonb, state jsonb) RETURNS jsonb
//
// (doc/reference/worker.md, "How periodic work runs"). The loop calls it
// until its state says 'finished', committing after each step when it may,
// and keeps the deadline, the progress and a failed step's error whole.
// Every route goes through it: a job the worker runs (src/worker_jobs.cpp),
// CALL counter.run_steps, and the features' procedures over it.
#pragma once

#include "counter_ext/wall.hpp"

namespace ce::spine {

// A kind as the registry has it. step is InvalidOid when the kind has no step
// function (an unknown kind, or a superuser's own kind that names a
// procedure: the job runner CALLs that).
struct Kind {
	bool known;
	Oid step;
};

// The kind 'kind' for 'caller': raises 42501 when its step function is not
// owned by a superuser, or is not counter_ext's own (schema
// counter_internal) and caller may not execute it. Needs SPI connected;
// reads the registry as the catalog's owner. Owns nothing C++.
Kind resolve(const char *kind, Oid caller);

// What a run ended with: the last state (in 'keep'), and its 'rows'.
struct Outcome {
	Datum state;
	bool rows_null;
	int64 rows;
};

// Runs kind's step function on target (NULL allowed) with args to the end,
// for 'caller' (the role the step functions check: they are called through
// fmgr, with caller noted as for an entry point). commits: SPI is connected
// (non-atomic where the caller may commit) and the loop commits after every
// step (SPI_commit refuses, 2D000, where it may not); else every step runs in
// the caller's transaction. 'keep' survives the commits. A failed step's
// error comes out as ce::PgError (after the run recorded it, committing).
Outcome run(Oid step, Oid caller, Datum target, bool target_null, Datum args, bool commits, MemoryContext keep);

} // namespace ce::spine
