-- dlua's side of bench/run.lua, as a worker process like the references' (one per row,
-- so that no row inherits another's heap, caches or threads): commands on stdin,
-- answers on stdout (the protocol is at the bottom of bench/cases.lua).
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
require("cases").worker(io.stdin, io.stdout)
