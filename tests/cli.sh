#!/bin/sh
# cli.sh - the ddpsim program as a user meets it: exit codes, messages,
# the self-check verdict, and cleanup after SIGTERM/SIGINT (no rank process,
# no /dev/shm segment left). Prints "N passed, N failed" and exits non-zero
# on any failure.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"

golden=${TEST_DATA_DIR:-$(dirname "$0")/data}/pytorch-ddp-mlp-3ranks
sched_file=$(mktemp) || exit 99
# Paths the tests need to be missing or unwritable are made here, never assumed of the machine: "$nowhere" does
# not exist (nothing creates it: ddpsim creates only the last component of an output path), "$afile" is a regular file,
# so nothing can be made under it, even by root.
scratch=$(mktemp -d) || exit 99
nowhere=$scratch/missing
afile=$scratch/afile
: >"$afile"
printf '# accumulate, then sync\n2*( nosync{fwd bwd} grab )\nfwd bwd grab\n' >"$sched_file"
trap 'rm -f "$out" "$err" "$sched_file"; rm -rf "$scratch"' EXIT

orphans_before=$(shm_orphans ddpsim)

expect 0 "verdict: PASS (31 of 31 scenarios: 24 at 4 ranks, 6 at 3, 1 under chaos (3 runs)" "ddpsim --ranks 4 passes the battery, its scaling-order scenarios at 3 ranks too" -- --ranks 4
if grep -q "4 is a power of two, so 1/4 is exact .* run at 3 ranks too" "$out" &&
    [ "$(grep -c '^ [a-z0-9-]* at 3 ' "$out")" = 6 ] && grep -q '^ classic at 3 ' "$out"; then
    ok "at 4 ranks the battery says so and runs the 6 scaling-order scenarios at 3, as rows of their own"
else
    bad "at 4 ranks the rows at 3: $(grep -c ' at 3 ' "$out")"
fi
# the plain command catches what only another N shows: post-divide (sum, then divide) at 4 ranks
expect 1 "# replay: ddpsim --ranks 4 --impl post-divide --scenario classic --ranks 3" \
    "post-divide: a plain --ranks 4 catches it in the rows at 3" -- --ranks 4 --impl post-divide
# with --mesh the ranks are the mesh's: no rows at another N, the note says what to run
expect 0 "note: N = 4 is a power of two, so 1/N is exact .* run --ranks 3 or 5 too" "--mesh: no rows at 3, a note" \
    -- --ranks 4 --shard hsdp --mesh 2x2
if grep -q '^ [a-z0-9-]* at 3 ' "$out"; then bad "--mesh 2x2 ran rows at 3"; else ok "... and no row at 3"; fi
expect 0 "verdict: PASS" "the battery at 3 ranks" -- --ranks 3 -q
if grep -q "power of two" "$out"; then bad "no power-of-two note at 3 ranks"; else ok "no power-of-two note at 3 ranks"; fi
expect 0 "ends-in-window" "--scenarios lists the battery" -- --scenarios
expect 2 "no scenario 'nope' (there are: classic, window-1" "an unknown scenario" -- --scenario nope
expect 2 "chooses the model and the schedule itself" "--scenario with --schedule" -- --scenario classic --schedule "fwd bwd grab"
expect 2 "belongs to a single run" "the battery with --dump" -- --dump "$nowhere/x"
expect 2 "repeats a single run: add --scenario NAME" "the battery with --repeat" -- --repeat 2
expect 1 "replay: ddpsim --impl post-divide --ranks 3 --scenario classic" "a failing battery names every failing scenario's replay" -- --impl post-divide --ranks 3
expect 0 "ranks differ under no_sync: yes" "sanity lines" -- --ranks 3 --scenario classic
expect 0 "verdict: PASS" "single rank" -- --ranks 1
expect 0 "verdict: PASS" "branchy with find-unused, ring, tiny buckets" -- --ranks 3 --model branchy --find-unused --algo ring --bucket-cap 1 --first-bucket-cap 1
expect 0 "verdict: PASS" "attn, exact, bucket view, ulp tolerance" -- --ranks 2 --model attn --algo exact --bucket-view --tolerance ulp:0
expect 0 "^# verdict: PASS" "quiet" -- --ranks 2 --quiet
expect 0 "verdict: PASS" "schedule from a file" -- --schedule "@$sched_file"
expect 0 "after no_sync fwd, bwd outside" "golden inputs" -- --ranks 3 --model mlp:4-8-3 --batch 2 --inputs "$golden" --schedule "2*(nosync{fwd bwd} grab) fwd bwd grab enter fwd exit bwd grab"
expect 0 "--find-unused" "help lists the options" -- --help
expect 0 "ddpsim check DIR \[OPTIONS\]" "help's usage lines name ddpsim check" -- --help
expect 0 "ddpsim " "version" -- --version
# --world mpi as this build allows: without MPI a usage error saying how to build it (tests/mpi.sh runs it with).
case $("$DDPSIM" --version 2>&1) in
*"MPI world: not built"*)
    expect 2 "ddpsim was built without MPI: install Open MPI" "--world mpi without MPI" -- --world mpi --ranks 2 ;;
*) expect 2 "--world: 'nope': expected one of fork|mpi" "--world with a bad value" -- --world nope ;;
esac
# --backend nccl as this build and machine allow: without NCCL a usage error (2);
# with NCCL and no usable GPU a runtime fault (3) naming CUDA's error, before any rank starts.
# (With a GPU, tests/gpu.sh runs the backend; tests/nccl-fake.sh its failure paths.)
case $("$DDPSIM" --version 2>&1) in
*"not built"*) expect 2 "built without NCCL" "--backend nccl in a build without NCCL" -- --backend nccl ;;
*"no usable GPU"*) expect 3 "no usable GPU" "--backend nccl on a machine without a usable GPU" -- --backend nccl ;;
*) echo "(a GPU is visible: the no-GPU case of --backend nccl is not checked here)" ;;
esac
expect 2 "expected one of cpu|nccl" "--backend with an unknown name" -- --backend gloo
expect 2 "goes with --backend nccl" "--nccl-op without --backend nccl" -- --nccl-op avg
expect 2 "out of range 1..256" "--ranks 0" -- --ranks 0
expect 2 "out of range 1..256" "--ranks 257" -- --ranks 257
expect 2 "not an integer" "--ranks four" -- --ranks four
expect 2 "expected one of ordered|ring|exact" "unknown algorithm" -- --algo tree
expect 2 "unknown option" "unknown option" -- --bogus
expect 2 "needs a value" "missing value" -- --ranks
expect 2 "unexpected argument" "stray argument" -- --ranks 2 extra
expect 2 "unknown implementation 'mine'" "unknown implementation" -- --impl mine
expect 2 "unknown model 'resnet'" "unknown model" -- --model resnet
expect 2 "add --find-unused" "branchy needs --find-unused" -- --model branchy
expect 2 "column 9: expected an op" "schedule: unknown op" -- --schedule "fwd bwd jump"
expect 2 "expected ')'" "schedule: unbalanced" -- --schedule "2*(fwd bwd"
expect 2 "no forward to run backward for" "schedule: bwd without fwd" -- --schedule "bwd"
expect 2 "not inside no_sync" "schedule: exit without enter" -- --schedule "exit"
expect 2 "backward through the graph a second time" "schedule: fwd bwd bwd (PyTorch refuses it)" -- --schedule "fwd bwd bwd"
expect 2 "op 3 (step) comes between a forward and its backward while gradients exist" "schedule: a step between fwd and bwd with gradients" -- --schedule "fwd bwd fwd step bwd"
expect 2 "op 4 (step) comes between" "schedule: ... also after zero_grad filling zeros" -- --schedule "fwd bwd zero fwd step bwd grab"
expect 0 "verdict: PASS" "schedule: ... accepted after zero_grad(set_to_none)" -- --schedule "fwd bwd zero fwd step bwd grab" --zero-grad none
expect 0 "verdict: PASS" "schedule: a step before any gradient, nested no_sync, forwards without backward" -- --ranks 3 --schedule "step fwd nosync{ nosync{fwd bwd} grab fwd bwd } grab nosync{fwd} fwd fwd bwd grab"
expect 2 "repeat count must be 0..100000" "schedule: count too large" -- --schedule "100001*(fwd bwd)"
expect 4 "NOTHING VERIFIED (the schedule has no grab)" "schedule: 0*(...) runs nothing" -- --schedule "0*(fwd bwd grab)"
expect 4 "NOTHING VERIFIED" "schedule: the empty schedule verifies nothing" -- --schedule ""
expect 2 "cannot open" "schedule file missing" -- --schedule "@$nowhere/schedule"
expect 2 "expected bitwise, order, ulp:N, ulp-of-max:N or rtol=X,atol=Y" "bad tolerance" -- --tolerance close
expect 2 "rtol=X,atol=Y needs both" "a tolerance with rtol alone" -- --tolerance rtol=1e-3
expect 2 "rtol given twice" "a tolerance with a key twice (the last would win: 100%)" -- --tolerance rtol=1e-3,atol=1e-5,rtol=1
expect 2 "rtol must be below 1" "a relative tolerance of 100%" -- --tolerance rtol=1,atol=0
expect 2 "--inputs: $nowhere/dump/manifest.json" "missing inputs" -- --scenario classic --inputs "$nowhere/dump"
expect 2 "--dump: cannot create $afile/x: $afile is not a directory" "unwritable dump" -- --scenario classic --dump "$afile/x"
# One rule for every output path: ddpsim creates only its last component, in a directory that exists.
for o in --dump --record --trace --json; do
    expect 2 "$o: cannot create $nowhere/a/out" "$o under a missing directory is refused before any rank starts" -- \
        --scenario classic $o "$nowhere/a/out"
done
check_nowhere() { [ ! -e "$nowhere" ]; }
if check_nowhere; then ok "... and none of them made a directory"; else bad "an output option made $nowhere"; fi
expect 0 "verdict: PASS" "the last component is created" -- --scenario classic --record "$scratch/newrec" -q
if [ -f "$scratch/newrec/manifest.json" ]; then ok "... there"; else bad "no $scratch/newrec/manifest.json"; fi
expect 2 "finite number" "bad lr" -- --lr nan
expect 2 "Try 'ddpsim --help'" "errors point to --help" -- --batch 0

# Communication hooks (PyTorch's allreduce_hook, fp16_compress_hook, bf16_compress_hook): reference and bucketed agree
# bitwise; a DDP that compresses by its own float16 code (libreorder_fp16: ranks summed last to first) matches the
# reference bitwise at 2 ranks, passes the order tolerance at 3 and 5 (the bound widened by float16's roundings), and
# fails bitwise at 3; without --comm-hook the same compression is a bug even under the order tolerance.
hookp=${PLUGIN_DIR:-$(dirname "$0")/plugin}/libreorder_fp16.so
for h in allreduce fp16 bf16; do
    expect 0 "verdict: PASS (23 of 25 scenarios" "--comm-hook $h: bucketed passes the battery bitwise" -- --ranks 3 --comm-hook $h --impl bucketed
done
expect 0 "comm hook fp16" "--comm-hook: the header says so" -- --ranks 2 --comm-hook fp16 --scenario classic
expect 0 "verdict: PASS (23 of 25 scenarios" "--comm-hook fp16 --algo exact" -- --ranks 3 --comm-hook fp16 --algo exact --impl bucketed
expect 1 "verdict: FAIL (6 of 31 scenarios: 6 diverge" "an independent float16 DDP: at 2 ranks 1/2 is exact, the rows at 3 show its other order" -- --ranks 2 --comm-hook fp16 --impl "$hookp"
if [ "$(grep -c '^ .*  FAIL  ' "$out")" = 6 ] && [ "$(grep '^ .*  FAIL  ' "$out" | grep -vc '^ [a-z0-9-]* at 3 ')" = 0 ] &&
    [ "$(grep -c '^ .*  PASS  ' "$out")" = 23 ]; then
    ok "... every scenario at 2 ranks matches bitwise; only the rows at 3 fail"
else
    bad "... the rows: $(grep ' FAIL \| PASS ' "$out" | head -30)"
fi
grep -q "^# replay: ddpsim --ranks 2 --comm-hook fp16 --impl .*libreorder_fp16.so --scenario classic --ranks 3$" "$out" &&
    ok "... a row at 3 replays with --ranks 3" || bad "... a row at 3's replay line: $(grep '^# replay' "$out" | head -2)"
expect 0 "verdict: PASS (23 of 25 scenarios" "... and the order tolerance at 3 ranks" -- --ranks 3 --comm-hook fp16 --impl "$hookp" --tolerance order
expect 0 "verdict: PASS (23 of 25 scenarios" "... and at 5 ranks" -- --ranks 5 --comm-hook fp16 --impl "$hookp" --tolerance order
expect 1 "verdict: FAIL" "... bitwise tells its order apart at 3 ranks" -- --ranks 3 --comm-hook fp16 --impl "$hookp" --scenario classic
expect 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight" "a compression nobody asked for fails under the order tolerance" -- --ranks 3 --impl "$hookp" --tolerance order --scenario classic
expect 2 "not ring: give --algo ordered or exact" "--comm-hook fp16 with --algo ring" -- --comm-hook fp16 --algo ring
expect 2 "expected one of none|allreduce|fp16|bf16" "--comm-hook: an unknown hook" -- --comm-hook fp8
expect 2 "the catalogue's bugs ('sum-not-average') are modelled on DDP without a communication hook" "--comm-hook with a catalogued bug" -- --impl sum-not-average --comm-hook fp16 --scenario classic
expect 2 "drop --comm-hook" "--mutants with --comm-hook" -- --mutants --comm-hook fp16
expect 2 "with --comm-hook fp16 the implementation's buckets are gathered" "--fault flip with a compressing hook" -- --comm-hook fp16 --fault flip:rank=1,op=5 --scenario classic
tmph=$(mktemp -d) || exit 99
"$DDPSIM" --ranks 3 --comm-hook fp16 --impl bucketed --scenario classic --record "$tmph/r" >/dev/null 2>&1
expect 0 "comm hook fp16" "ddpsim check reads the hook from a recording" -- check "$tmph/r"
sed 's/"comm_hook": "fp16"/"comm_hook": "none"/' "$tmph/r/manifest.json" >"$tmph/m" && cp "$tmph/m" "$tmph/r/manifest.json"
expect 1 "verdict: FAIL" "... and the same recording judged without the hook fails" -- check "$tmph/r"
rm -rf "$tmph"

# static_graph: the same gradients; what the torch of --static-graph-rule cannot run with it is refused (python.sh
# checks both rules on real torch: 1.13 and 2.x).
expect 0 "verdict: PASS (11 of 25 scenarios: 24 at 3 ranks, 1 under chaos (0 runs); 73 grabs, bitwise; not run here, each row says why: window-2, window-5, buckets, odd-sizes, find-unused, tail-window, buffers, ends-in-window, uneven, uneven-divide, momentum, adamw, loss-scale, buckets, chaos 1-3)" "--static-graph: the battery, less what torch < 2.1 cannot run" -- --ranks 3 --static-graph --static-graph-rule first-iteration --impl bucketed
expect 0 "verdict: PASS (6 of 25 scenarios: 24 at 3 ranks, 1 under chaos (0 runs); 34 grabs, bitwise; not run here, each row says why: classic, window-2, window-5, nosync-edges, zero-and-step, buckets, odd-sizes, bucket-view, find-unused, attention, tiny-tensor, tail-window, uneven, uneven-divide, momentum, adamw, loss-scale, ragged-tokens, buckets, chaos 1-3)" "--static-graph: the battery, less what torch 2.1+ cannot run" -- --ranks 3 --static-graph --impl bucketed
expect 2 "op 4 (bwd) is a backward no sync armed, through a forward between the first and the second syncing forward" "--static-graph, torch < 2.1: a no_sync micro-step after the first sync" -- --static-graph --static-graph-rule first-iteration --schedule "fwd bwd nosync{fwd bwd} grab"
expect 0 "verdict: PASS" "... which torch 2.1+ runs" -- --static-graph --schedule "fwd bwd nosync{fwd bwd} grab"
expect 0 "verdict: PASS" "--static-graph: the same micro-step after the second sync runs" -- --static-graph --static-graph-rule first-iteration --schedule "fwd bwd fwd bwd nosync{fwd bwd} grab"
expect 2 "op 2 (bwd), the first backward, is one no sync armed" "--static-graph, torch 2.1+: a first backward in no_sync" -- --static-graph --schedule "nosync{fwd bwd} fwd bwd grab"
expect 0 "verdict: PASS" "... which torch < 2.1 runs" -- --static-graph --static-graph-rule first-iteration --schedule "nosync{fwd bwd} fwd bwd grab"
expect 2 "static-graph-rule" "an unknown --static-graph-rule" -- --static-graph --static-graph-rule sometimes --scenario tied
expect 2 "static_graph requires the same graph every iteration" "--static-graph with branchy" -- --static-graph --model branchy --find-unused --schedule "fwd bwd grab fwd bwd grab"
expect 2 "not with --algo ring" "--static-graph with ring" -- --static-graph --algo ring --schedule "fwd bwd grab"

# Buffers (--model bn): PyTorch 1.13's broadcast_buffers rule, compared bitwise and named when they differ.
bplug=${PLUGIN_DIR:-$(dirname "$0")/plugin}
expect 0 "verdict: PASS" "bn: bucketed broadcasts the buffers as PyTorch does" -- --ranks 3 --model bn --impl bucketed
expect 1 "first divergence: grab 1 (after no_sync fwd+bwd (2 acc)), rank 1, buffer bn.running_mean, element 0" "bn: buffers never broadcast before a forward are caught and named" -- --ranks 3 --impl no-buffer-broadcast --scenario buffers
expect 0 "verdict: PASS" "--broadcast-buffers off: the reference and bucketed agree without the broadcasts" -- --ranks 3 --model bn --impl bucketed --broadcast-buffers off
expect 0 "verdict: PASS" "--broadcast-buffers off: the reference broadcasts none either, so never broadcasting passes" -- --ranks 3 --impl no-buffer-broadcast --scenario buffers --broadcast-buffers off
tmpb=$(mktemp -d) || exit 99
"$DDPSIM" --ranks 3 --impl no-buffer-broadcast --scenario buffers --record "$tmpb/r" >/dev/null 2>&1
expect 1 "rank 1, buffer bn.running_mean, element 0" "ddpsim check replays broadcast_buffers on a recording" -- check "$tmpb/r"
"$DDPSIM" --ranks 3 --impl bucketed --scenario buffers --record "$tmpb/ok" >/dev/null 2>&1
expect 0 "verdict: PASS" "... and passes a correct one's" -- check "$tmpb/ok"
rm "$tmpb/ok/rank1/fwd2/seen/bn.running_var.npy"
expect 2 "rank1/fwd2/seen/bn.running_var.npy" "... and a recording missing a buffer's file is bad input" -- check "$tmpb/ok"
rm -rf "$tmpb"
expect 2 "batch norm in train mode needs a batch of at least 2 rows" "bn with a batch of one is refused before any rank starts" -- --model bn --batch 1
expect 2 "was built for interface version 1, which cannot see them; rebuild it against version 3" "bn with a version-1 plugin is refused" -- --model bn --impl "$bplug/libv1_plugin.so"
expect 2 "--broadcast-buffers" "--broadcast-buffers takes on or off" -- --model bn --broadcast-buffers maybe

# Uneven inputs (PyTorch's model.join()): the battery's uneven scenarios pass above; join's catalogue bugs are
# caught there (--mutants below). Without join, a rank that runs out is a named deadlock, not a hang.
uneven='fwd bwd grab step zero [3, -1:1]*( fwd bwd grab step zero ) fwd bwd grab step'
expect 3 "rank 3 ran out of inputs after 1 of 3 iterations of the uneven repetition at line 1, column 24, outside join" "uneven inputs without join: a named deadlock" -- --ranks 4 --schedule "$uneven"
expect 0 "verdict: PASS" "... and inside join every rank gets through, bucketed too" -- --ranks 4 --impl bucketed --schedule "fwd bwd grab step zero join{ [3, -1:1]*( fwd bwd grab step zero ) } fwd bwd grab step"
expect 0 "verdict: PASS" "join under chaos, rank 0 out first, 5 ranks, bucketed" -- --ranks 5 --impl bucketed --chaos 7 --model bn --schedule "fwd bwd grab step zero join{ [3, 0:1, 2:2]*( nosync{fwd bwd} fwd bwd grab step zero ) } fwd bwd grab"
expect 1 "first divergence: grab 4 (after fwd+bwd (2 acc)), rank 0, parameter fc1.weight" "a join that divides by the ranks running is caught" -- --ranks 3 --impl join-divides-by-running --scenario uneven
expect 3 "ranks disagree on a collective" "a join that shadows no_sync forwards with allreduces: the collectives are named" -- --ranks 3 --impl join-ignores-no-sync --scenario uneven
expect 2 "names rank 7, but the run has 4 ranks" "an uneven count naming a rank the run lacks, before any rank starts" -- --ranks 4 --schedule "fwd bwd [2, 7:1]*( fwd bwd )"
expect 2 "inside join, an uneven repetition must end the block" "join: a rank that runs out would go on alone" -- --schedule "fwd bwd join{ [2, 1:1]*( fwd bwd ) grab }"
expect 2 "(interface version 4), and '$bplug/libexample_impl.so' leaves them NULL" "join with a plugin that has no join callbacks" -- --ranks 2 --impl "$bplug/libexample_impl.so" --scenario uneven-divide
expect 2 "join{...} with --comm-hook" "join with a communication hook is refused" -- --ranks 2 --comm-hook allreduce --scenario uneven
tmpj=$(mktemp -d) || exit 99
"$DDPSIM" --ranks 4 --impl join-final-sync-skips-buffers --scenario uneven --record "$tmpj/r" >/dev/null 2>&1
expect 1 "buffer bn.running_mean" "ddpsim check replays join on a recording: the last joiner's buffers" -- check "$tmpj/r"
"$DDPSIM" --ranks 4 --impl bucketed --scenario uneven --record "$tmpj/ok" >/dev/null 2>&1
expect 0 "verdict: PASS" "... and passes a correct one's" -- check "$tmpj/ok"
[ ! -e "$tmpj/ok/bucketed/rank3/grab3" ] && [ -e "$tmpj/ok/bucketed/rank2/grab3" ] && ok "a rank that ran out records no grab it skipped" || bad "grab files of a rank that ran out"
sed 's/"counts": \[3, 3, 3, 1\]/"counts": [3, 3, 3, 3]/' "$tmpj/ok/manifest.json" >"$tmpj/m" && mv "$tmpj/m" "$tmpj/ok/manifest.json"
expect 2 "bucketed/rank3/grab3/" "... and a recording whose counts do not match its files is bad input" -- check "$tmpj/ok"
rm -rf "$tmpj"

# Implementations: a catalogued bug is a divergence (exit 1) with its first divergence; plugins.
plugins=${PLUGIN_DIR:-$(dirname "$0")/plugin}
expect 0 "verdict: PASS (21 of 25 scenarios" "a plugin that refuses some scenarios' options passes the rest" -- --ranks 3 --impl "$plugins/libexample_impl.so"
grep -q "find-unused .* REFUSED .*does not support find_unused" "$out" && ok "a refused scenario says why" ||
    bad "a refused scenario says why"
expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" "sync-on-exit is caught" -- --impl sync-on-exit --ranks 2 --scenario classic
# After a failed step the reference goes on from the implementation's parameters (doc/SEMANTICS.md "After a
# divergence"): each window (zero_grad to step) is judged from where it starts, and a DIFF row is in a window that
# went wrong. Without it every check after the first failed step failed: these rows would all be DIFF.
diff_rows() { sed -n 's/^ *\(grab [0-9]*\|step [0-9]*\|end\)  .* DIFF$/\1/p' "$out" | tr '\n' ','; }
expect 1 "verdict: FAIL (6 of 8 grabs and 2 of 5 parameter checks diverge, bitwise)" "sync-on-exit: the windows that went wrong are counted" -- --impl sync-on-exit --ranks 4 --scenario classic
rows=$(diff_rows)
[ "$rows" = "grab 0,grab 1,grab 2,step 0,grab 4,grab 5,grab 6,step 2," ] &&
    ok "... both windows of three micro-steps fail, both windows of one pass ($rows)" ||
    bad "... the failing rows are '$rows', not the windows of three"
expect 1 "verdict: FAIL (6 of 8 grabs and 0 of 5 parameter checks diverge, order)" "... under the order tolerance its steps are within the bound" -- --impl sync-on-exit --ranks 3 --scenario classic --tolerance order
rows=$(diff_rows)
[ "$rows" = "grab 0,grab 1,grab 2,grab 4,grab 5,grab 6," ] && ok "... the grabs of those windows ($rows)" ||
    bad "... under order the failing rows are '$rows'"
# The gradients are not taken: boundary-false-in-backward leaves each synced grab unreduced and reduces at the step,
# whose parameters are right; taking its gradients at the grab would have judged those steps wrong.
expect 1 "verdict: FAIL (4 of 8 grabs and 0 of 5 parameter checks diverge, bitwise)" "a reduction deferred to the step: its grabs fail, its right steps do not" -- --impl boundary-false-in-backward --ranks 4 --scenario classic
rows=$(diff_rows)
[ "$rows" = "grab 2,grab 3,grab 6,grab 7," ] && ok "... the synced grabs alone ($rows)" || bad "... fails at '$rows'"
expect 1 "verdict: FAIL (5 of 8 grabs and 3 of 5 parameter checks diverge, bitwise)" "a skipped zero_grad" -- --impl no-zero-after-step --ranks 2 --scenario classic
rows=$(diff_rows)
[ "$rows" = "grab 3,step 1,grab 4,grab 5,grab 6,step 2,grab 7,step 3," ] &&
    ok "... every window after the first step fails, the first does not, nor the end ($rows)" || bad "... fails at '$rows'"
expect 1 "verdict: FAIL (0 of 8 grabs and 4 of 5 parameter checks diverge, bitwise)" "a momentum buffer advanced per micro-step: every gradient right, the steps wrong" -- --impl momentum-per-microstep --ranks 2 --scenario momentum
rows=$(diff_rows)
[ "$rows" = "step 0,step 1,step 2,step 3," ] && ok "... the four steps fail (the windows of one too: the buffer's error is carried, the reference keeps its own)" ||
    bad "... fails at '$rows'"
# Parameters that are not finite are not taken: a NaN synced and stepped into the implementation's parameters
# fails where it appears, and the reference, which keeps its own, passes its sanity checks (taking them, its
# forward's loss was NaN and the rank failed); the implementation's NaN loss after it is not a failed rank either.
expect 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight, element 0: expected [0-9.e-]*, actual nan" \
    "a NaN stepped into the implementation's parameters: a FAIL where it appears" -- \
    --impl "$plugins/libexample_nan_grad.so" --ranks 3 --scenario classic
grep -q "^# sanity: reference equals the exact average of every rank's local gradients: ok" "$out" &&
    grep -q "^# verdict: FAIL (6 of 8 grabs and 5 of 5 parameter checks diverge, bitwise)" "$out" &&
    ok "... the reference's sanity holds, and every later check fails against its own parameters" ||
    bad "... the reference took the NaN or the counts moved"
# The chaos pass: a bucketed DDP that launches each bucket as it fills (the race PyTorch's in-order launch avoids)
# is right wherever every rank's gradients become ready in the same order, so every plain row passes; the row of
# the buckets scenario under chaos seeds catches it, and names the seed to replay.
racy=$plugins/libbuckets_launch_as_filled.so
expect 0 "verdict: PASS" "a bucket launched as it fills passes the buckets scenario without chaos" -- --ranks 3 \
    --scenario buckets --impl "$racy"
expect 3 "# replay: ddpsim --ranks 3 --impl $racy --scenario buckets --sched pct:2 --chaos 1" \
    "... the battery's chaos pass catches it (ranks disagree on a collective) and names the seed (a plugin's pass is scheduled)" -- --ranks 3 --impl "$racy"
if grep -q '^ buckets, chaos 1-3 .* FAULT     chaos seed 1: fault: .*ranks disagree on a collective' "$out" &&
    [ "$(grep -cE '^ .*[0-9]  (FAIL|FAULT) ' "$out")" = 1 ] && [ "$(grep -c '^ .*[0-9]  PASS  ' "$out")" = 21 ]; then
    ok "... in the row 'buckets, chaos 1-3' alone; the plain rows pass (21; 3 it refuses, as the example)"
else
    bad "... the rows: $(grep -c '  PASS  ' "$out") PASS, $(grep ' chaos 1-3 ' "$out")"
fi
expect 0 "verdict: PASS (22 of 25 scenarios: 24 at 3 ranks, 1 under chaos (3 runs)" \
    "... while the example it comes from, launching in bucket order, passes the chaos pass" -- --ranks 3 \
    --impl "$plugins/libexample_buckets.so" --bucket-cap 4K
expect 0 "verdict: PASS (24 of 24 scenarios, 169 grabs x 3 ranks, bitwise)" \
    "under --chaos SEED every row is under that seed: no chaos pass of its own" -- --ranks 3 --chaos 5
expect 1 "verdict: FAIL" "post-divide is caught bitwise" -- --impl post-divide --ranks 3
expect 0 "verdict: PASS" "post-divide passes the order tolerance" -- --impl post-divide --ranks 3 --tolerance order
expect 3 "for the implementation, rank 1 called allreduce of 7312 float (sum, ordered) for the reference" "rank-never-syncs is named, not hung" -- --impl rank-never-syncs --ranks 3 --scenario classic --timeout 10
expect 0 "verdict: PASS" "bucketed passes" -- --impl bucketed --ranks 4 --bucket-cap 100 --first-bucket-cap 100
# The step's optimizer (--optimizer): torch.optim.SGD with momentum, checked through its carried buffers.
expect 0 "verdict: PASS (8 grabs and 5 parameter checks x 3 ranks match, bitwise)" "--scenario momentum: DDP with torch's SGD momentum" -- --ranks 3 --scenario momentum
expect 1 "first divergence: step 0 (parameters after step), rank 0, parameter 0.weight" "momentum-per-microstep: a buffer advanced at every backward is caught at the first step after a window" -- --ranks 3 --impl momentum-per-microstep --scenario momentum
expect 0 "verdict: PASS" "momentum-per-microstep is right without momentum, windows or not" -- --ranks 3 --impl momentum-per-microstep --scenario window-5
expect 0 "verdict: PASS (10 grabs and 11 parameter checks x 3 ranks match, bitwise)" "momentum-per-microstep is right with windows of one" -- --ranks 3 --impl momentum-per-microstep --optimizer momentum --scenario window-1
expect 0 "verdict: PASS (25 of 25" "--optimizer momentum:0.5, the battery: post-divide passes order through carried buffers" -- --ranks 5 --impl post-divide --tolerance order --optimizer momentum:0.5
expect 1 "verdict: FAIL" "... and bitwise sees post-divide there" -- --ranks 5 --impl post-divide --optimizer momentum:0.5 --scenario momentum
expect 0 "verdict: PASS" "a version-1 plugin (no optimizer_step) is stepped by ddpsim with momentum" -- --ranks 3 --impl "$plugins/libv1_plugin.so" --optimizer momentum --scenario momentum
# torch.optim.AdamW (--optimizer adamw): its moments and count carried, its bound through the division.
expect 0 "verdict: PASS (8 grabs and 5 parameter checks x 3 ranks match, bitwise)" "--scenario adamw: DDP with torch's AdamW" -- --ranks 3 --scenario adamw
grep -q "lr 0.1, AdamW betas (0.9, 0.999), eps 1e-08, weight decay 0.01$" "$out" || bad "the report's header says AdamW and its hyperparameters"
expect 0 "AdamW betas (0.8, 0.99), eps 1e-06, weight decay 0" "--optimizer adamw: the hyperparameters given" -- --ranks 3 --scenario classic --optimizer adamw:beta1=0.8,beta2=0.99,eps=1e-6,wd=0
expect 0 "verdict: PASS (25 of 25" "--optimizer adamw, the battery: post-divide passes order through carried moments" -- --ranks 5 --impl post-divide --tolerance order --optimizer adamw
# (each window judged from where it starts: its synced grab and its step fail, the grabs under no_sync do not)
expect 1 "verdict: FAIL (4 of 8 grabs and 4 of 5 parameter checks diverge, bitwise)" "... and bitwise sees post-divide there" -- --ranks 5 --impl post-divide --optimizer adamw --scenario adamw
expect 0 "verdict: PASS" "a version-1 plugin (no optimizer_step) is stepped by ddpsim with AdamW" -- --ranks 3 --impl "$plugins/libv1_plugin.so" --optimizer adamw --scenario adamw
expect 2 "--optimizer: 'adamw:beta2=1': beta2 must be in .0, 1)" "--optimizer adamw: a beta out of range" -- --optimizer adamw:beta2=1
expect 2 "--optimizer: 'adamw:eps=0': eps must be a number in .1e-30, 1e30. (with eps 0 a zero moment makes the update 0 / 0)" "--optimizer adamw: eps 0" -- --optimizer adamw:eps=0
expect 2 "--optimizer: 'adamw:lr=0.1': expected adamw.:beta1=B,beta2=B,eps=E,wd=W. (the learning rate is --lr's)" "--optimizer adamw: an unknown key" -- --optimizer adamw:lr=0.1
expect 2 "--optimizer: 'adamwx': expected adamw.:beta1=B" "--optimizer adamwx" -- --optimizer adamwx
expect 2 "--optimizer: 'adam': expected sgd, momentum.:M. or adamw" "--optimizer with an unknown name" -- --optimizer adam
expect 2 "--optimizer: 'momentum:1': the momentum must be a number in (0, 1)" "--optimizer momentum:1" -- --optimizer momentum:1
expect 2 "the momentum must be a number in (0, 1)" "--optimizer momentum with a bad number" -- --optimizer momentum:0.9x
expect 0 "self-add-each-microstep" "--list shows the catalogue" -- --list
expect 0 "sync-flag-steps .*huggingface/accelerate PR #2790" "--list: each bug with its source" -- --list
expect 1 "first divergence: grab 9 (after fwd+bwd (2 acc))" "tail-window: the short window's sync is missed by an engine that counts" -- --ranks 3 --impl tail-window-dropped --scenario tail-window
expect 3 "ranks disagree on a collective: rank 0 called allreduce of 280 float" "skip-none-grads: different sizes named, not hung" -- --ranks 3 --impl skip-none-grads --scenario find-unused
# clip_grad_norm_ (clip:MAX, --clip MAX[:inf]): DDP's implementations are clipped by ddpsim's torch-like clip of
# their .grad; its float norm is within the bound of the reference's exact one, the same bits on every rank.
expect 0 "# clip: 8 clips over all ranks: every rank's coefficient the same bits, within the bound of the reference's exact norm" "clip: the L2 and the inf norm in a schedule" -- --ranks 4 --schedule "fwd bwd clip:0.01 grab step zero fwd bwd clip:0.005:inf grab step"
grep -q "^# verdict: PASS (2 grabs and 3 parameter checks x 4 ranks match, bitwise)" "$out" && ok "... and the clipped gradients and steps match bitwise" || bad "... and the clipped gradients and steps match bitwise"
expect 0 "every coefficient 1: nothing was clipped, lower MAX to check the clipping" "clip: a MAX that clips nothing is said" -- --ranks 3 --schedule "fwd bwd clip:1000 grab step"
expect 0 "verdict: PASS (25 of 25 scenarios: 24 at 3 ranks, 1 under chaos (3 runs); 187 grabs, order)" "--clip: the battery clipped before every step a loop clips, under order" -- --ranks 3 --clip 0.01 --tolerance order -q
expect 0 "verdict: PASS (25 of 25" "--clip: the bucketed built-in, the inf norm, with momentum" -- --ranks 5 --impl bucketed --clip 0.01:inf --optimizer momentum -q
expect 0 "grab step zero ) + --clip 0.01 (before every step a training loop clips)" "--clip: the header says the schedule is clipped" -- --ranks 2 --scenario classic --clip 0.01
expect 2 "--schedule: schedule line 1, column 14: clip's max_norm must be a positive finite number (found '0')" "clip:0 is refused" -- --schedule "fwd bwd clip:0 step"
expect 2 "clip's max_norm must be a positive finite number" "clip:-1 is refused" -- --schedule "fwd bwd clip:-1 step"
expect 2 "clip's max_norm must be a positive finite number" "clip:inf is refused" -- --schedule "fwd bwd clip:inf step"
expect 2 "expected ':MAX' after 'clip'" "clip without MAX is refused" -- --schedule "fwd bwd clip step"
expect 2 "clip's norm type must be 2 or inf" "clip:1:3 is refused" -- --schedule "fwd bwd clip:1:3 step"
expect 2 "clip's norm type must be 2 or inf" "clip:1:infx is refused" -- --schedule "fwd bwd clip:1:infx step"
expect 2 "unexpected text after a clip op (found '{')" "clip:1{ is refused" -- --schedule "fwd bwd clip:1{ step"
expect 2 "clipping needs the gradients of a syncing backward" "clip after a backward inside no_sync is refused" -- --schedule "nosync{fwd bwd} clip:1 step"
expect 2 "clipping needs the gradients of a syncing backward" "clip after zero_grad is refused" -- --schedule "fwd bwd zero clip:1 step"
expect 2 "a backward onto clipped gradients" "a backward after a clip, before zero_grad, is refused" -- --schedule "fwd bwd clip:1 fwd bwd grab"
expect 2 "clipping inside join is not supported" "clip inside join is refused" -- --ranks 2 --schedule "fwd bwd step zero join{ [2, -1:1]*( fwd bwd clip:1 step zero ) }"
expect 2 "--clip: the schedule has clip ops of its own" "--clip with a schedule that clips is refused" -- --clip 1 --schedule "fwd bwd clip:1 step"
expect 2 "--clip: '0': expected MAX or MAX:inf" "--clip 0 is refused" -- --clip 0
expect 2 "--clip: '1:x': expected MAX or MAX:inf" "--clip 1:x is refused" -- --clip 1:x
# A clipped run recorded (record version 8: the clips' arguments, each rank's coefficients) replays the same records.
cscratch=$(mktemp -d)
records_agree "$cscratch" "clip: a recorded run with L2 and inf clips, live and replayed" -- --ranks 3 \
    --schedule "2*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero ) fwd bwd clip:0.01:inf grab step"
grep -q '"clips": .{"op": 7, "max_norm": 0.01, "norm_type": 2}' "$cscratch/d/manifest.json" &&
    ok "... its manifest names the clips" || bad "... its manifest names the clips"
rm "$cscratch/d/reference/rank1/clip1.json"
expect 2 "clip1.json: missing: the coefficient the clip applied (rank 1's clip 1)" "... and a recording without a rank's coefficient is bad input" -- check "$cscratch/d"
"$DDPSIM" --ranks 2 --schedule "fwd bwd clip:0.5:inf grab step" --dump "$cscratch/dump" -q >/dev/null 2>&1
grep -q '{"op": "clip", "max_norm": 0.5, "norm_type": "inf"}' "$cscratch/dump/manifest.json" &&
    ok "clip: a dump's manifest has the clip op with its arguments" || bad "clip: a dump's manifest has the clip op with its arguments"
rm -rf "$cscratch"

# Loss scaling (--loss-scale, torch's GradScaler) and a planted overflow (--fault inf|nan): the inf of one rank's
# early micro-step survives the accumulation, reaches every rank through the sync, and skips that step everywhere;
# the scale backs off, then grows after two steps taken. The detectors fire on the catalogue's bugs (found-inf-always,
# unscale-after-update, zero2-found-inf-unreduced, fsdp-found-inf-copied-early: --mutants and tests/patterns.sh).
LS="3*( nosync{fwd bwd} grab fwd bwd grab step zero )"
expect 0 "the scale 512 to 1024; 4 inf or NaN elements where the reference's planted ones went" "loss scale: an inf on rank 1 in a no_sync micro-step" -- --ranks 3 --loss-scale dynamic:1024,2,0.5,2 --schedule "$LS" --fault inf:rank=1,op=2
grep -q "3 of the unscales found an inf or NaN and skipped the step" "$out" && ok "... every rank skipped that one step" || bad "... every rank skipped that one step"
expect 0 "3 of the unscales found an inf or NaN and skipped the step; the scale 128 to 128" "loss scale: a NaN, a static scale that never moves" -- --ranks 3 --loss-scale 128 --schedule "$LS" --fault nan:rank=2,op=6
expect 0 "verdict: PASS (6 grabs and 4 parameter checks x 2 ranks match, order)" "loss scale: the bucketed built-in under the order tolerance, clipping after the unscale" -- --ranks 2 --impl bucketed --tolerance order --loss-scale dynamic:64,2,0.5,1 --schedule "3*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero )" --fault inf:rank=0,op=2
expect 1 "first divergence: the unscale at op 13, before step 0 (parameters after step), rank 0: the implementation found an inf or NaN and skips the step; the reference found none" "loss scale: an unscale that always finds an inf is caught at the first step" -- --ranks 3 --impl found-inf-always --scenario loss-scale
expect 1 "did not find an inf or NaN and takes the step; the reference found one (the inf or NaN planted in rank 3's backward at op 17)" "loss scale: a sharded finding never reduced is caught, the planted inf named" -- --ranks 4 --shard zero2 --impl zero2-found-inf-unreduced --scenario s-loss-scale
expect 1 '"kind": "skip", "found_inf": false, "reference_found_inf": true, "fault_op": 17, "fault_rank": 3' "loss scale: the failing unscale in --json" -- --ranks 4 --shard fsdp --impl fsdp-found-inf-copied-early --scenario s-loss-scale --json -
expect 0 "verdict: PASS (13 of 13 scenarios" "loss scale: the example plugin's GradScaler (interface version 9) over its shard" -- --ranks 3 --shard zero2 --impl "$plugins/libexample_zero2.so" -q
expect 2 "--loss-scale: scale 3: expected a power of two from 2^-149 to 2^127" "--loss-scale 3 is refused" -- --loss-scale 3
expect 2 "GROWTH 3 is not a power of two above 1" "--loss-scale dynamic:1024,3 is refused" -- --loss-scale dynamic:1024,3
expect 2 "INTERVAL 0 is not a whole number of steps" "--loss-scale dynamic:1024,2,0.5,0 is refused" -- --loss-scale dynamic:1024,2,0.5,0
expect 2 "--fault inf: op=0 is 'enter', not a backward (bwd)" "--fault inf at an op that is not a backward is refused" -- --loss-scale 8 --schedule "$LS" --fault inf:rank=0,op=0
expect 2 "--fault nan: needs --loss-scale" "--fault nan without a scaler is refused" -- --schedule "$LS" --fault nan:rank=0,op=2
expect 2 "--fault: rank=5 does not exist (--ranks 2)" "--fault inf on a rank that does not exist is refused" -- --ranks 2 --loss-scale 8 --schedule "$LS" --fault inf:rank=5,op=2
# The trainer's loss normalization on ragged tokens (--model lm, --loss-norm; doc/SEMANTICS.md "Loss
# normalization"): every factor checked, a correct trainer passes each intent, each mistake is caught and named.
expect 0 "loss normalization (global-tokens): every rank's factor at 18 backwards was the intended one" \
    "loss norm: ddpsim's trainer on the ragged-tokens scenario" -- --ranks 3 --scenario ragged-tokens
for n in global-tokens micro-batch-mean sum; do
    expect 0 "loss normalization ($n): every rank's factor at 24 backwards was the intended one" \
        "loss norm $n: the example plugin's own trainer (interface version 10, counts gathered)" -- --ranks 4 \
        --scenario ragged-tokens --impl "$plugins/libexample_impl.so" --loss-norm "$n"
done
expect 0 "verdict: PASS" "loss norm: a version-1 plugin gets ddpsim's trainer" -- --ranks 3 --scenario ragged-tokens \
    --impl "$plugins/libv1_plugin.so"
expect 1 "pattern: the factor is 1 / this rank's own valid tokens of the window" \
    "loss norm: a plugin normalizing by its own rank's tokens is caught at its first backward, the mistake named" -- \
    --ranks 3 --scenario ragged-tokens --impl "$plugins/libexample_local_tokens.so"
grep -q "first divergence: the loss normalization of the backward at op 2, .*rank 0, micro-step 1 of its window's 3" \
    "$out" && ok "... where: op, rank, micro-step" || bad "... where: $(grep 'first divergence' "$out")"
expect 1 "pattern: a constant factor, 0.5 x the intended one at each of the 2 backwards" \
    "loss norm: a factor off by a constant that no known mistake gives is named as one" -- --ranks 3 \
    --scenario ragged-tokens --impl "$plugins/libexample_half_factor.so" --loss-norm sum
for bug in "norm-micro-batch-mean:a mean of micro-batch means" "norm-rank-local:a rank-local mean" \
    "norm-dropped:DDP's average kept" "norm-after-backward:DDP's average undone" \
    "norm-empty-counted:an empty sequence counted as one token" \
    "norm-rescale-each-micro-step:an exponential moving average instead of a sum" \
    "norm-local-when-one-step:the rescale skipped when accumulation is 1" \
    "norm-tail-configured-steps:A the configured accumulation count"; do
    expect 1 "pattern: .*${bug#*:}" "loss norm: ${bug%%:*} caught, its mistake named" -- --ranks 4 \
        --scenario ragged-tokens --impl "${bug%%:*}"
done
# the configured accumulation count where a mean of means is intended: right in full windows, caught in the
# shorter ones (the epoch's tail), and named
expect 1 "first divergence: the loss normalization of the backward at op 13, .* micro-step 1 of its window's 1" \
    "loss norm: a mean over the configured count is caught in the first shorter window" -- --ranks 3 \
    --scenario ragged-tokens --impl norm-tail-configured-steps --loss-norm micro-batch-mean
grep -q "pattern: the factor is 1 / (A x this micro-batch's tokens), A the configured accumulation count" "$out" &&
    ok "... the mistake named alone" || bad "... the mistake: $(grep 'pattern' "$out")"
# a micro-batch without a valid token takes any factor (its positions are never multiplied): a mean over no
# tokens (inf) is no failure, and the mean of means is right where it is what the trainer intends
expect 0 "loss normalization (micro-batch-mean): every rank's factor at 18 backwards was the intended one" \
    "loss norm: the mean of means under micro-batch-mean, inf at the empty micro-batch included" -- --ranks 3 \
    --scenario ragged-tokens --impl norm-micro-batch-mean --loss-norm micro-batch-mean
expect 1 '"loss_norm": {"norm": "global-tokens", "backwards_checked": 18, "failed": 16' \
    "loss norm: --json's loss_norm object" -- --ranks 3 --scenario ragged-tokens --impl norm-dropped --json -
expect 2 "--loss-norm: mlp:32-64-64-16 has no token loss" "loss norm: refused on a model without a token loss" -- \
    --loss-norm sum --schedule "fwd bwd grab"
expect 2 "scenario classic runs mlp:32-64-64-16, which has no token loss" \
    "loss norm: refused with a single scenario of another model" -- --loss-norm sum --scenario classic
expect 2 "'tokens': expected global-tokens, micro-batch-mean or sum" "loss norm: an unknown normalization" -- \
    --loss-norm tokens
expect 2 "a schedule with uneven repetitions or join{...} is not modelled with the token loss" \
    "loss norm: refused with uneven inputs" -- --model lm --schedule "[2, -1:1]*( fwd bwd grab step zero )"
# Equal counts hide half the catalogue: on lm-equal (every position valid) a rank-local mean, a mean of means,
# empty sequences counted and a local mean in windows of one are the intended factor, and pass; the others still
# fail; ddpsim's own trainer passes. What the ragged counts of lm are for.
RT="nosync{fwd bwd fwd bwd} grab fwd bwd grab step zero fwd bwd grab step zero nosync{fwd bwd} fwd bwd grab step zero"
for bug in reference:0 norm-rank-local:0 norm-micro-batch-mean:0 norm-empty-counted:0 norm-local-when-one-step:0 \
    norm-dropped:1 norm-after-backward:1 norm-rescale-each-micro-step:1 norm-tail-configured-steps:1; do
    expect "${bug#*:}" "loss normalization (global-tokens):" "loss norm on equal counts: ${bug%%:*} exits ${bug#*:}" -- \
        --ranks 3 --model lm-equal --schedule "$RT" --impl "${bug%%:*}"
done
# --prepare of the token model for a front end: its manifest names the normalization, its targets mark padding
# -100 (python/ddpsim_torch/tokens.py counts them); --inputs does not carry the counts, refused.
nprep=$(mktemp -d)
expect 0 "" "loss norm: --prepare of the token model" -- --ranks 3 --scenario ragged-tokens --prepare "$nprep/in" \
    --loss-norm sum
grep -q '"loss_norm": "sum"' "$nprep/in/manifest.json" && ok "... its manifest names the normalization" ||
    bad "... its manifest names the normalization"
expect 2 "--model lm: --inputs does not carry the token counts yet" "loss norm: --inputs refused with the token model" -- \
    --ranks 3 --scenario ragged-tokens --inputs "$nprep/in"
rm -rf "$nprep"
# A loss-scaled run recorded (record version 9: "loss_scale", "planted", each backward's scale, each unscale's
# finding) replays the same records; the replay's checks fire on a recording whose scale or finding is wrong.
lscratch=$(mktemp -d)
records_agree "$lscratch" "loss scale: a recorded run with a planted inf, live and replayed" -- --ranks 3 \
    --loss-scale dynamic:1024,2,0.5,2 --schedule "$LS" --fault inf:rank=1,op=2
grep -q '"loss_scale": "dynamic:1024,2,0.5,2"' "$lscratch/d/manifest.json" &&
    grep -q '"planted": \[{"kind": "inf", "rank": 1, "op": 2}\]' "$lscratch/d/manifest.json" &&
    ok "... its manifest names the scaler and the planted inf" || bad "... its manifest names the scaler and the planted inf"
lsfresh() { rm -rf "$lscratch/e" && cp -r "$lscratch/d" "$lscratch/e"; }
lsfresh; echo '{"scale": 2048}' >"$lscratch/e/reference/rank1/scale3.json"
expect 1 "first divergence: the loss scale of the backward at op 16, before grab 3 (after fwd+bwd (2 acc)), rank 1: the implementation multiplied its loss by 2048, the reference by 512 (4 x)" \
    "... a rank's scale that is not the reference's is caught in the replay, that rank named first" -- check "$lscratch/e" -q
lsfresh; echo '{"found_inf": false}' >"$lscratch/e/reference/rank2/unscale0.json"
expect 1 "rank 2: the implementation did not find an inf or NaN and takes the step; the reference found one (the inf or NaN planted in rank 1's backward at op 2)" \
    "... and an unscale that missed the planted inf" -- check "$lscratch/e" -q
lsfresh; rm "$lscratch/e/reference/rank2/scale0.json"
expect 2 "scale0.json: missing: the scale the backward multiplied the loss by (rank 2's scale 0)" "... a recording without a backward's scale is bad input" -- check "$lscratch/e"
lsfresh; echo '{"scale": -4}' >"$lscratch/e/reference/rank1/scale3.json"
expect 2 "scale3.json: \"scale\" must be a positive finite number" "... and one with a negative scale" -- check "$lscratch/e"
lsfresh; echo '{"found_inf": 1}' >"$lscratch/e/reference/rank0/unscale1.json"
expect 2 "unscale1.json: \"found_inf\" must be true or false" "... and a finding that is not a boolean" -- check "$lscratch/e"
lsfresh; cp "$lscratch/e/rank0/micro0/"*.npy "$lscratch/e/rank1/micro0/"
expect 2 "rank1/micro0: the manifest's \"planted\" inf at op 2 is not in this backward's local gradients" \
    "... and one whose planted backward's local gradients lack the inf (the replay plants nothing itself)" -- check "$lscratch/e"
lsfresh; sed 's/"loss_scale": .*,$//' "$lscratch/d/manifest.json" >"$lscratch/e/manifest.json"
expect 2 "\"planted\" needs \"loss_scale\"" "... a planted inf without a scaler" -- check "$lscratch/e"
lsfresh; sed 's/"op": 2}/"op": 1}/' "$lscratch/d/manifest.json" >"$lscratch/e/manifest.json"
expect 2 "planted 0: \"op\" must be the index of a backward (bwd) among the 30 ops" "... an inf planted at an op that is no backward" -- check "$lscratch/e"
lsfresh; sed 's/"loss_scale": "dynamic:1024,2,0.5,2"/"loss_scale": "dynamic:1024,3"/' "$lscratch/d/manifest.json" >"$lscratch/e/manifest.json"
expect 2 "GROWTH 3 is not a power of two above 1" "... a scaler spec --loss-scale refuses" -- check "$lscratch/e"
# A NaN's window clipped: torch's norm and coefficient are NaN, and a correct clip's NaN is no divergence (it was
# one, against a bound of NaNs); a number where the reference's is NaN is one.
records_agree "$lscratch" "loss scale: a NaN's window clipped, live and replayed" -- --ranks 2 --loss-scale 128 \
    --schedule "3*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero )" --fault nan:rank=1,op=2
grep -q "verdict: PASS" "$lscratch/live" && ok "... passes" || bad "... passes: $(grep verdict "$lscratch/live")"
echo '{"coef": 0.04}' >"$lscratch/d/reference/rank0/clip0.json"
echo '{"coef": 0.04}' >"$lscratch/d/reference/rank1/clip0.json"
expect 1 "the clip at op 7, before grab 1 (after fwd+bwd (2 acc)), rank 0: coefficient 0.0399999991, outside it: the reference's global norm is NaN (a NaN among the gradients), so a correct clip's coefficient is NaN" \
    "... and a number where the reference's coefficient is NaN is caught" -- check "$lscratch/d" -q
rm -rf "$lscratch"
expect 2 "--loss-scale: not with uneven inputs or join{} (the schedule has them): torch's GradScaler has no join hook" "--loss-scale with uneven inputs is refused" -- --ranks 2 --loss-scale 8 --schedule "fwd bwd step zero join{ [2, -1:1]*( fwd bwd step zero ) }"
expect 2 "has no scaler_scale and scaler_unscale (interface version 9)" "--loss-scale: a sharded plugin without the hooks is refused" -- --ranks 2 --shard zero2 --impl "$plugins/libzero2_v7.so" --loss-scale 8 --schedule "$LS"
expect 2 "has one of scaler_scale and scaler_unscale: loss scaling needs both or neither" "a plugin with half a GradScaler is refused when loaded" -- --ranks 2 --impl "$plugins/libhalf_scaler.so"
# --prepare writes the scaler and the planted faults for a front end (python/ddpsim_torch/scaling.py).
lprep=$(mktemp -d)
expect 0 "" "--prepare with loss scaling and a planted inf" -- --prepare "$lprep/in" --loss-scale dynamic:8,2,0.5,3 --schedule "$LS" --fault inf:rank=0,op=2
grep -q '"loss_scale": "dynamic:8,2,0.5,3"' "$lprep/in/manifest.json" &&
    grep -q '"planted": \[{"kind": "inf", "rank": 0, "op": 2}\]' "$lprep/in/manifest.json" &&
    ok "... its manifest has them" || bad "... its manifest has them"
rm -rf "$lprep"
# The catch matrix: every catalogued bug over the battery, twice (hundreds of runs, most of this script's time).
# DDPSIM_CLI_TESTS=processes (tests/load.sh, beside busy loops) leaves it out: it is semantics, which do not
# depend on timing; it runs in make check and under the sanitizers.
if [ "${DDPSIM_CLI_TESTS:-all}" != processes ]; then
    expect 0 "mutation score: 66 of 66 caught" "--mutants catches every bug, DDP's and the sharded ones" -- --mutants
    grep -q "^ momentum-per-microstep .*caught .* momentum " "$out" && ok "--mutants: the momentum scenario catches a buffer advanced per micro-step" ||
        bad "--mutants: the momentum scenario catches a buffer advanced per micro-step"
    expect 0 "1 bug only a bitwise comparison catches passes, as the catalogue says: post-divide" "--mutants under the order tolerance (the NCCL backend's default) says which bugs only bitwise catches" -- --mutants --tolerance order
    grep -q "^ decide-at-backward .* nosync-edges " "$out" && ok "--mutants names the scenario that caught each" ||
        bad "--mutants names the scenario that caught each"
    grep -q "^ tail-window-dropped .*caught" "$out" && ok "--mutants: the engine that counts its own window is caught" ||
        bad "--mutants: the engine that counts its own window is caught"
    grep -q "^ no-buffer-broadcast .* buffers " "$out" && ok "--mutants: the buffers scenario catches buffers never broadcast" ||
        bad "--mutants: the buffers scenario catches buffers never broadcast"
    grep -q "^ disarm-in-no-sync .* arming " "$out" && ok "--mutants: the arming scenario catches a forward inside no_sync that disarms" ||
        bad "--mutants: the arming scenario catches a forward inside no_sync that disarms"
else
    echo "SKIP: the --mutants catch matrix (DDPSIM_CLI_TESTS=processes)"
fi
expect 0 "verdict: PASS" "the example plugin runs" -- --impl "$plugins/libexample_impl.so" --ranks 3
tmpp=$(mktemp -d) || exit 99
expect 0 "verdict: PASS" "a plugin's dump" -- --impl "$plugins/libexample_impl.so" --dump "$tmpp/d" --schedule "fwd bwd grab"
if [ -f "$tmpp/d/example/rank1/grab0/0.weight.npy" ] && grep -q '"impls": \["reference", "example"\]' "$tmpp/d/manifest.json"; then
    ok "a plugin's gradients are dumped under its name"; else bad "a plugin's gradients are dumped under its name"; fi
rm -rf "$tmpp"
expect 2 "interface version 99" "a plugin of another version" -- --impl "$plugins/libbad_version.so"
expect 3 "failed in backward_end: mismatch: its allreduce failed: ranks disagree on a collective: rank 0 called allreduce of 7312 float (sum, ordered) for the implementation, rank 1 called allreduce of 7311 float (sum, ordered) for the implementation" \
    "a plugin whose ranks call a collective with different counts is named" -- --ranks 3 --scenario classic --impl "$plugins/libmismatch.so"
expect 3 "deadlock: ranks 1 and 2 have finished, and every other rank waits in a collective that needs them" \
    "a rank left waiting after the others finished is a deadlock, named at once" -- --ranks 3 --scenario classic --timeout 600 --impl "$plugins/libextra_at_end.so"
grep -q "rank 0 (pid [0-9]*): stopped by the supervisor, in op 40 (end), inside allreduce" "$err" &&
    ok "the deadlock names where rank 0 waits" || bad "the deadlock names where rank 0 waits"
expect 2 "was built for interface version 1, which cannot see zero_to_none" \
    "a version-1 plugin cannot run --zero-grad none with --bucket-view" -- --impl "$plugins/libv1_plugin.so" --zero-grad none --bucket-view
expect 0 "verdict: PASS" "a version-1 plugin still runs" -- --ranks 3 --impl "$plugins/libv1_plugin.so" --zero-grad none
expect 2 "does not export ddpsim_impl_get" "a plugin without the entry" -- --impl "$plugins/libno_entry.so"
expect 2 "cannot load plugin" "a missing plugin" -- --impl ./no-such-plugin.so
expect 3 "does not support find_unused" "a plugin failing at create" -- --impl "$plugins/libexample_impl.so" --model branchy --find-unused
tmpj=$(mktemp) || exit 99
expect 1 "verdict: FAIL" "json of a failing run" -- --impl never-sync --ranks 2 --json "$tmpj" --schedule "fwd bwd grab"
if grep -q '"result": "fail"' "$tmpj" && grep -q '"first_divergence": {"check": "grab 0", "kind": "gradients", "rank": 0, "param": "0.weight", "buffer": false, "index": 0' "$tmpj" &&
    grep -q '"match": false' "$tmpj"; then ok "json names the first divergence"; else bad "json names the first divergence"; fi
rm -f "$tmpj"

# Faults: exit codes and reports.
expect 3 "rank 1 was killed by signal 9" "crash fault" -- --ranks 3 --scenario classic --fault crash:rank=1,op=7
expect 3 "rank 2 was killed by signal 6" "abort fault" -- --ranks 3 --scenario classic --fault abort:rank=2,op=3
expect 3 "in op 5 (enter), not in a collective \\[stuck\\]" "hang fault names the stuck rank" -- --ranks 3 --scenario classic --fault hang:rank=0,op=5 --timeout 1
expect 0 "verdict: PASS" "slow fault changes nothing but time" -- --ranks 3 --scenario classic --fault slow:rank=1,ms=2
expect 1 "fault: flip, rank 2 before op 10" "flip fault is caught and named" -- --ranks 3 --scenario classic --fault flip:rank=2,op=10
# --json on a run without a verdict is a valid document all the same: the fault, its rank, what each rank had done.
jfield() { /usr/bin/env python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
expect 3 "rank 1 was killed by signal 9" "crash fault with --json" -- --ranks 3 --scenario classic --fault crash:rank=1,op=7 --json "$scratch/fault.json"
if [ "$(jfield "$scratch/fault.json" '(d["result"], d["verdict"], d["exit_code"], d["failed_rank"], d["rank_states"][1]["fate"], d["rank_states"][1]["op"])' 2>&1)" = "('fault', None, 3, 1, 'killed', 7)" ]; then
    ok "... the JSON names the fault, rank 1 and its op"
else
    bad "... the JSON of a fault: $(jfield "$scratch/fault.json" 'd' 2>&1 | head -c 300)"
fi
expect 3 "" "the watchdog with --json -" -- --ranks 2 --scenario classic --fault hang:rank=0,op=5 --timeout 1 --json -
if [ "$(jfield /dev/stdin '(d["result"], d["exit_code"], "no rank made progress" in d["error"])' <"$out" 2>&1)" = "('fault', 3, True)" ]; then
    ok "... a JSON document on standard output"
else
    bad "... no JSON document of the watchdog on standard output"
fi
expect 2 "rank=5 does not exist" "fault on a missing rank" -- --ranks 3 --scenario classic --fault crash:rank=5,op=1
expect 2 "past the schedule" "fault past the schedule" -- --scenario classic --fault crash:rank=0,op=999
expect 2 "expected crash|abort|hang|flip" "unknown fault" -- --fault melt:rank=0,op=1
expect 2 "needs rank= and op=" "incomplete fault" -- --fault crash:op=1

# Chaos, repeat, trace, replay.
expect 0 "implementation under every chaos seed: bitwise identical" "repeat bucketed under chaos" -- --ranks 3 --scenario classic --impl bucketed --bucket-cap 100 --repeat 4
expect 0 "reference under every chaos seed: bitwise identical" "a chaos range" -- --ranks 2 --scenario classic --chaos 7..9
expect 1 "reference under every chaos seed: bitwise identical" "a failing chaos range: the reference compared up to the first failing check" -- --ranks 2 --impl never-sync --scenario classic --chaos 3..5
expect 1 "replay: ddpsim --ranks 2 --impl never-sync --scenario classic --chaos 3" "repeat lists failing seeds with their replay" -- --ranks 2 --impl never-sync --scenario classic --repeat 3 --chaos 3 --fail-fast
if [ "$(grep -c '^chaos ' "$err")" -eq 1 ]; then ok "fail-fast stops at the first failing seed"; else bad "fail-fast stops at the first failing seed"; fi
expect 2 "goes with --repeat" "fail-fast alone" -- --fail-fast
expect 2 "belong to single runs" "repeat with a dump" -- --scenario classic --repeat 2 --dump "$nowhere/x"
tmpt=$(mktemp -d) || exit 99
expect 0 "chaos seed 5" "trace a chaotic run" -- --ranks 3 --scenario classic --impl bucketed --chaos 5 --trace "$tmpt/t.jsonl"
expect 0 "replaying the ready-event and arrival order" "replay it" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpt/t.jsonl"
expect 2 "recorded for another run" "replay of another run" -- --ranks 2 --scenario classic --replay "$tmpt/t.jsonl"
if head -1 "$tmpt/t.jsonl" | grep -q '"ddpsim_trace": 3' && grep -q '"ev": "ready", "us": [0-9.]*, "param"' "$tmpt/t.jsonl" &&
    grep -q '"ev": "arrive", "us": [0-9.]*, "pos"' "$tmpt/t.jsonl" &&
    grep -q '"ev": "coll", "us": [0-9.]*, "kind": "allreduce", "group": "world", "bytes": [0-9]*, "dur_us"' "$tmpt/t.jsonl" &&
    grep -q '"ev": "reduced", "us": [0-9.]*, "what": "bucket", "item": 0, "dur_us": [0-9.]*, "thread": 1}' "$tmpt/t.jsonl" &&
    [ ! -e "$tmpt/t.jsonl.rank0" ]; then
    ok "the trace is JSON lines with times, ready events, arrivals, the implementation's collectives and buckets"
else
    bad "the trace is JSON lines with times, ready events, arrivals, the implementation's collectives and buckets"
fi
# a version-2 trace (no times, no collectives) still replays; a version from a later ddpsim is refused
sed -e '1s/"ddpsim_trace": 3/"ddpsim_trace": 2/' -e 's/, "us": [0-9.]*//' "$tmpt/t.jsonl" >"$tmpt/v2.jsonl"
expect 0 "replaying the ready-event and arrival order" "a version-2 trace replays" -- --ranks 3 --scenario classic \
    --impl bucketed --replay "$tmpt/v2.jsonl"
sed '1s/"ddpsim_trace": 3/"ddpsim_trace": 4/' "$tmpt/t.jsonl" >"$tmpt/v4.jsonl"
expect 2 "is trace version 4; this ddpsim reads versions 2 to 3" "a trace of a later version is refused" -- --ranks 3 \
    --scenario classic --impl bucketed --replay "$tmpt/v4.jsonl"
rm -rf "$tmpt"

# The JSON report and the dump manifest.
tmpd=$(mktemp -d) || exit 99
expect 0 "verdict: PASS" "json and dump" -- --ranks 2 --json "$tmpd/r.json" --dump "$tmpd/d" --schedule "nosync{fwd bwd} grab fwd bwd grab"
if grep -q '"result": "pass"' "$tmpd/r.json" && grep -q '"first_divergence": null' "$tmpd/r.json" &&
    [ "$(grep -c '"check": "grab' "$tmpd/r.json")" -eq 4 ] && [ "$(grep -c '"check": "end"' "$tmpd/r.json")" -eq 2 ] && grep -q '"format": "ddpsim-dump"' "$tmpd/d/manifest.json" &&
    [ -f "$tmpd/d/reference/rank1/grab1/4.bias.npy" ] && [ -f "$tmpd/d/rank0/batch1.y.npy" ] && [ -f "$tmpd/d/init/0.weight.npy" ]; then
    ok "json report and dump layout"
else
    bad "json report and dump layout"
fi
# Memory counted honestly: the ranks' PSS added up counts the pages they share (the libraries, the segment)
# once, so it is well below their RSS peaks added up; -1 only where the kernel has no smaps_rollup.
pss=$(sed -n 's/.*"ranks_pss_kib": \(-*[0-9]*\).*/\1/p' "$tmpd/r.json")
rss=$(sed -n 's/.*"ranks_total_kib": \([0-9]*\).*/\1/p' "$tmpd/r.json")
if [ ! -r /proc/self/smaps_rollup ] && [ "$pss" = -1 ]; then
    ok "memory: no smaps_rollup here, said as -1"
elif [ -n "$pss" ] && [ "$pss" -gt 0 ] && [ -n "$rss" ] && [ "$pss" -lt "$rss" ]; then
    ok "memory: the ranks' PSS together ($pss KiB) counts shared pages once, below their RSS added ($rss KiB)"
else
    bad "memory: ranks_pss_kib '$pss', ranks_total_kib '$rss'"
fi
expect 2 "--json: cannot create" "unwritable json" -- --ranks 2 --json "$afile/r.json" --schedule "fwd bwd grab"
rm -rf "$tmpd"

# Verdicts that must not be a pass, and input that must be refused before any rank starts.
expect 4 "NOTHING VERIFIED (the schedule has no grab)" "a run without a grab verifies nothing" -- --schedule "fwd bwd"
expect 4 "NOTHING VERIFIED (every grab compared only zeros)" "a grab of zeros verifies nothing" -- --schedule "grab"
expect 1 "reference equals the exact average of every rank's local gradients: ok" \
    "a flip is the implementation's fault, the reference stays sane" -- --ranks 4 --scenario classic --impl bucketed --fault flip:rank=2,op=24
if grep -q "grabs and .* parameter checks diverge" "$out"; then ok "the flip is blamed on the implementation"; else bad "the flip is blamed on the implementation"; fi
expect 2 "run past the largest seed" "--repeat past the last seed" -- --scenario classic --repeat 3 --chaos 18446744073709551615
expect 0 "2 runs, 0 failing" "a chaos range ending at the largest seed ends" -- --scenario classic --chaos 18446744073709551614..18446744073709551615 -q
expect 2 "shorter than the shortest watchdog" "--timeout under 1 s" -- --timeout 0.001
expect 2 "needs about" "a model too large for the machine" -- --model mlp:8192-16384-8192 --ranks 64
expect 2 "floats of activations" "an attention block too long" -- --model attn:32-65536-16
expect 2 "rank=-1 is not a whole number" "a fault's field is named" -- --fault crash:rank=-1,op=1
expect 2 "--json: cannot write /dev/full" "--json to a device that takes nothing" -- --json /dev/full
expect 2 "is a directory" "--json to a directory" -- --json "$scratch"
expect 2 "cannot create" "--json into a missing directory" -- --json "$nowhere/r.json"
"$DDPSIM" --json - --schedule "fwd bwd grab" >"$out" 2>"$err"
if [ $? -eq 0 ] && head -c 1 "$out" | grep -q '{' && grep -q "verdict: PASS" "$err"; then
    ok "--json - writes JSON to stdout and the table to stderr"; else bad "--json - writes JSON to stdout and the table to stderr"; fi
"$DDPSIM" --schedule "fwd bwd grab" >/dev/full 2>"$err"
if [ $? -ne 0 ] && grep -q "cannot write to standard output" "$err"; then ok "a full stdout is an error"; else bad "a full stdout is an error"; fi
# The report's lines wait in temporary files while the run streams its records: none can be made, exit 3 before the run.
TMPDIR=$nowhere "$DDPSIM" --scenario classic --ranks 2 >"$out" 2>"$err"
if [ $? -eq 3 ] && grep -q "temporary file in $nowhere" "$err" && ! grep -q "verdict" "$out"; then
    ok "no temporary file for the report: exit 3 before the run"; else bad "no temporary file for the report: exit 3 before the run"; fi
tmpd=$(mktemp -d) || exit 99
TMPDIR=$tmpd "$DDPSIM" --scenario classic --ranks 2 --json "$tmpd/r.json" >"$out" 2>"$err"
if [ $? -eq 0 ] && grep -q "verdict: PASS" "$out" && [ "$(ls -A "$tmpd")" = r.json ]; then
    ok "the report's temporary files live in TMPDIR and are gone after"; else bad "the report's temporary files live in TMPDIR and are gone after"; fi
rm -rf "$tmpd"
# A --json write that fails after the run: the reader of a FIFO takes the byte written when it is opened, then
# goes away (the run takes ~0.2 s: it is long gone by then). A pass becomes exit 3; a failure keeps its 1.
tmpf=$(mktemp -d) || exit 99
mkfifo "$tmpf/j" || exit 99
(head -c 1 "$tmpf/j" >/dev/null &)
expect 3 "cannot write --json $tmpf/j: Broken pipe" "a JSON report that cannot be written after a pass" -- --ranks 2 -q \
    --schedule "1000*(fwd bwd grab)" --json "$tmpf/j"
(head -c 1 "$tmpf/j" >/dev/null &)
expect 1 "cannot write --json $tmpf/j: Broken pipe" "a JSON report that cannot be written keeps the failure" -- \
    --ranks 2 -q --impl never-sync --schedule "1000*(fwd bwd grab)" --json "$tmpf/j"
rm -rf "$tmpf"
tmpi=$(mktemp -d) || exit 99
cp -r "$golden" "$tmpi/g"
gold_args="--ranks 3 --model mlp:4-8-3 --batch 2 --schedule 2*(nosync{fwd,bwd},grab) --inputs"
# shellcheck disable=SC2086
expect 0 "verdict: PASS" "a copy of the golden inputs" -- $gold_args "$tmpi/g"
cp -r "$tmpi/g" "$tmpi/t" && sed -i 's/(8, 4)/(4, 8)/' "$tmpi/t/init/0.weight.npy"
# shellcheck disable=SC2086
expect 2 "expected float32 of shape \[8, 4\], found float32 of shape \[4, 8\]" "a transposed init tensor" -- $gold_args "$tmpi/t"
cp -r "$tmpi/g" "$tmpi/n" && printf '\000\000\300\177' | dd of="$tmpi/n/init/2.bias.npy" bs=1 seek=128 conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
expect 2 "2.bias.npy: element 0 is nan" "a NaN in an initial weight" -- $gold_args "$tmpi/n"
cp -r "$tmpi/g" "$tmpi/m" && rm "$tmpi/m/manifest.json"
# shellcheck disable=SC2086
expect 2 "manifest.json: No such file" "inputs without a manifest" -- $gold_args "$tmpi/m"
cp -r "$tmpi/g" "$tmpi/b" && printf '{"format": "ddpsim-dump",' >"$tmpi/b/manifest.json"
# shellcheck disable=SC2086
expect 2 "manifest.json: line 1, column 26: expected a member name" "a broken manifest" -- $gold_args "$tmpi/b"
cp -r "$tmpi/g" "$tmpi/r" && sed -i 's/"ranks": 3/"ranks": 7/' "$tmpi/r/manifest.json"
# shellcheck disable=SC2086
expect 2 "made with ranks 7, this run has --ranks 3" "a manifest of 7 ranks" -- $gold_args "$tmpi/r"
cp -r "$tmpi/g" "$tmpi/x" && rm "$tmpi/x/rank1/batch3.x.npy"
expect 2 "rank1/batch3.x.npy" "a missing batch is refused before the run" -- --ranks 3 --model mlp:4-8-3 --batch 2 \
    --schedule "4*(fwd bwd grab)" --inputs "$tmpi/x"
expect 0 "verdict: PASS" "a dump made with --bucket-view" -- --bucket-view --ranks 3 --dump "$tmpi/d" --schedule "fwd bwd grab"
expect 2 "the dump was made with ddp.gradient_as_bucket_view true, this run has false (--bucket-view)" \
    "inputs replayed with other options" -- --ranks 3 --inputs "$tmpi/d" --schedule "fwd bwd grab"
# Every option the manifest records is compared (manifest.h), static_graph and broadcast_buffers among them; a
# version-2 manifest (before broadcast_buffers was written) is still read, and compared on what it says.
expect 0 "verdict: PASS" "a dump made with --static-graph" -- --static-graph --ranks 3 --dump "$tmpi/sg" --schedule "fwd bwd grab"
expect 2 "ddp.static_graph true, this run has false (--static-graph)" "... read without it" -- \
    --ranks 3 --inputs "$tmpi/sg" --schedule "fwd bwd grab"
expect 0 "verdict: PASS" "a dump made with --broadcast-buffers off" -- --broadcast-buffers off --ranks 3 --dump "$tmpi/bb" \
    --schedule "fwd bwd grab"
expect 2 "ddp.broadcast_buffers false, this run has true (--broadcast-buffers)" "... read without it" -- \
    --ranks 3 --inputs "$tmpi/bb" --schedule "fwd bwd grab"
sed -i 's/"version": 3/"version": 2/; s/, "broadcast_buffers": false//' "$tmpi/bb/manifest.json"
expect 0 "verdict: PASS" "... and as version 2, which did not record it" -- --ranks 3 --inputs "$tmpi/bb" --schedule "fwd bwd grab"
expect 2 "holds an earlier ddpsim dump; give --force" "--dump over an earlier dump" -- --ranks 3 --dump "$tmpi/d" --schedule "fwd bwd grab"
expect 0 "verdict: PASS" "--dump --force replaces it" -- --ranks 2 --dump "$tmpi/d" --force --schedule "fwd bwd grab"
if [ ! -e "$tmpi/d/rank2" ] && [ -f "$tmpi/d/rank1/batch0.x.npy" ]; then ok "no stale file of the earlier dump is left"; else bad "no stale file of the earlier dump is left"; fi
mkdir -p "$tmpi/o" && echo notes >"$tmpi/o/notes.txt"
# --prepare: a run's inputs alone, the layout --inputs reads back (branchy's branch with them).
# --prepare says which backward syncs and which forward armed it (PyTorch's arming): a front end asks, it does not
# work it out again. fwd nosync{fwd bwd}: the backward inside no_sync syncs, armed by forward 0.
expect 0 "the inputs of 3 forwards" "--prepare of a re-armed schedule" -- --ranks 2 --schedule "fwd nosync{fwd bwd} fwd bwd" --prepare "$tmpi/arm"
if grep -q '{"op": "backward", "syncs": true, "armed_by": 0}' "$tmpi/arm/manifest.json" &&
    grep -q '{"op": "backward", "syncs": true, "armed_by": 2}' "$tmpi/arm/manifest.json"; then
    ok "... its manifest names the arming forward of each syncing backward"
else
    bad "... its manifest: $(grep -o '{"op": "backward"[^}]*}' "$tmpi/arm/manifest.json" | tr '\n' ' ')"
fi
expect 0 "the inputs of 6 forwards on 3 ranks" "--prepare writes a run's inputs" -- --ranks 3 --scenario find-unused --prepare "$tmpi/p"
if [ -f "$tmpi/p/rank2/batch5.branch.npy" ] && [ -f "$tmpi/p/init/unused.bias.npy" ] && grep -q '"op": "no_sync_enter"' "$tmpi/p/manifest.json" &&
    [ ! -e "$tmpi/p/reference" ]; then ok "--prepare: manifest, init, batches and branches, no gradients"; else bad "--prepare: manifest, init, batches and branches, no gradients"; fi
expect 0 "verdict: PASS" "the prepared inputs run" -- --ranks 3 --scenario find-unused --inputs "$tmpi/p"
printf '\007\000\000\000' | dd of="$tmpi/p/rank1/batch2.branch.npy" bs=1 seek=128 conv=notrunc 2>/dev/null
expect 2 "rank1/batch2.branch.npy: branch 7" "a branch that is not 1..3" -- --ranks 3 --scenario find-unused --inputs "$tmpi/p"
expect 2 "holds an earlier ddpsim dump" "--prepare over earlier inputs" -- --ranks 3 --scenario find-unused --prepare "$tmpi/p"
expect 2 "runs nothing" "--prepare with --dump" -- --scenario classic --prepare "$tmpi/q" --dump "$tmpi/r"
expect 2 "belongs to a single run" "--prepare for the battery" -- --prepare "$tmpi/q"
expect 2 "schedule" "--prepare of a bad schedule" -- --schedule "fwd grab bwd )" --prepare "$tmpi/q"
expect 2 "is not empty and holds no ddpsim dump" "--dump into a directory of other files" -- --scenario classic --dump "$tmpi/o" --force
rm -rf "$tmpi"
tmpr=$(mktemp -d) || exit 99
"$DDPSIM" --ranks 3 --scenario classic --impl bucketed --chaos 5 --trace "$tmpr/t.jsonl" -q >/dev/null 2>&1
head -5 "$tmpr/t.jsonl" >"$tmpr/cut.jsonl"
sed 's/"pos": [0-9]*/"pos": 0/' "$tmpr/t.jsonl" >"$tmpr/zero.jsonl"
grep -v '"rank": 1,' "$tmpr/t.jsonl" >"$tmpr/norank1.jsonl"
printf 'garbage!\n' >"$tmpr/garbage.jsonl"
expect 2 "cut.jsonl is cut short" "a truncated trace" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpr/cut.jsonl"
expect 2 "two ranks arrived in position 0" "a trace whose arrival positions are all 0" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpr/zero.jsonl"
expect 2 "has no events of rank 1" "a trace without rank 1" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpr/norank1.jsonl"
expect 2 "is not a ddpsim trace" "a garbage trace" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpr/garbage.jsonl"
expect 2 "is a directory, not a trace file" "a directory as a trace" -- --ranks 3 --scenario classic --impl bucketed --replay "$tmpr"
# a trace cut mid-line (a copy interrupted, a disk full): said as cut short, not as a format error
size=$(wc -c <"$tmpr/t.jsonl")
head -c $((size - 20)) "$tmpr/t.jsonl" >"$tmpr/midline.jsonl"
last=$(wc -l <"$tmpr/midline.jsonl")
expect 2 "midline.jsonl is cut short at line $((last + 1)): its last line is incomplete" "a trace cut mid-line" -- \
    --ranks 3 --scenario classic --impl bucketed --replay "$tmpr/midline.jsonl"

# Failed runs replay up to where they stopped: the supervisor writes the end of every rank that did not finish
# (how it ended), the header how the run failed; a replay forces the recorded interleaving as far as every rank
# went, then says whether it ended the same way.
# ... a collective mismatch (exit 3)
"$DDPSIM" --ranks 3 --scenario uneven --impl sync-on-exit --trace "$tmpr/mismatch.jsonl" -q >/dev/null 2>&1
if [ "$(grep -c '"ev": "end", .*"how": "\(failed\|stopped\)"}$' "$tmpr/mismatch.jsonl")" = 3 ] &&
    head -1 "$tmpr/mismatch.jsonl" | grep -q '"failure": ".*ranks disagree on a collective'; then
    ok "a failed run's trace: every rank's end with how it ended, the failure in the header"
else
    bad "a failed run's trace: $(grep '"end"' "$tmpr/mismatch.jsonl" | head -3)"
fi
expect 3 "this run ended the same way" "a collective mismatch replays to the same failure" -- --ranks 3 \
    --scenario uneven --impl sync-on-exit --replay "$tmpr/mismatch.jsonl"
grep -q "a run that did not finish, forced up to where it stopped, free after: .*failed" "$out" &&
    ok "... its header says how each rank of the recorded run ended" || bad "... its header: $(grep replay "$out")"
# ... a hang (the watchdog, exit 3): the same fault replays to the same place; without the fault the run finishes and
# at another op it stops elsewhere, each said (the comparison firing both ways)
hang="--ranks 3 --scenario classic --timeout 2"
# shellcheck disable=SC2086
"$DDPSIM" $hang --fault hang:rank=1,op=5 --trace "$tmpr/hang.jsonl" -q >/dev/null 2>&1
# shellcheck disable=SC2086
expect 3 "this run ended the same way" "a hang replays to the same place" -- $hang --fault hang:rank=1,op=5 \
    --replay "$tmpr/hang.jsonl"
grep -q "the recorded run ended: rank 0 in op 9 (grab), inside allreduce #4; rank 1 in op 5 (enter), not in a collective" \
    "$err" && ok "... where each rank was, in words" || bad "... where each rank was: $(grep 'recorded run' "$err")"
# shellcheck disable=SC2086
expect 0 "this run finished: the recorded failure did not happen again" "a hang's trace replayed without the hang" \
    -- $hang --replay "$tmpr/hang.jsonl"
# shellcheck disable=SC2086
expect 3 "this run ended otherwise: rank 0 in op" "a hang's trace replayed with the hang elsewhere" -- $hang \
    --fault hang:rank=1,op=8 --replay "$tmpr/hang.jsonl"
rm -rf "$tmpr"

# The collectives self-check.
expect 0 "verdict: PASS" "selfcheck" -- selfcheck --ranks 4
expect 0 "verdict: PASS" "selfcheck: ring, pieces and jitter" -- selfcheck --ranks 3 --algo ring --count 1000 --slot-bytes 256 --jitter 200 --jitter-seed 5
expect 2 "out of range 1..2G" "selfcheck --count 0" -- selfcheck --count 0
expect 2 "not a size" "selfcheck --count 1.5M" -- selfcheck --count 1.5M
expect 2 "not a number of seconds" "selfcheck --timeout abc" -- selfcheck --timeout abc
expect 2 "Try 'ddpsim selfcheck --help'" "selfcheck errors point to its help" -- selfcheck --iters 0
expect 0 "mlp:4-8-3 " "bench model runs" -- bench model --model mlp:4-8-3 --model attn:8-4-8 --iters 2 --warmup 0
expect 2 "unknown model 'resnet'" "bench model: bad spec" -- bench model --model resnet
expect 2 "out of range 1..65536" "bench model: bad batch" -- bench model --batch 0
expect 2 "unknown subcommand .nothing." "bench: unknown kind" -- bench nothing
tmpb=$(mktemp) || exit 99
expect 0 "verdict: PASS (0 wrong elements)" "bench allreduce sweep" -- bench allreduce --ranks 3 --min-bytes 4K --max-bytes 64K --iters 3 --warmup 1 --json "$tmpb"
if [ "$(grep -c '"bytes": ' "$tmpb")" -eq 5 ] && grep -q '"algo": "ordered", "time_us": ' "$tmpb" && grep -q '"wrong": 0}' "$tmpb"; then
    ok "bench allreduce json"; else bad "bench allreduce json"; fi
# The speed-of-light kernel and the barrier floor are measured in the same run: every row has a positive
# sol_us and x_sol, and the barrier a positive time.
if [ "$(grep -Ec '"sol_us": [0-9.]*[1-9][0-9.e+-]*, "x_sol": [0-9.]*[1-9]' "$tmpb")" -eq 5 ] &&
    grep -Eq '"barrier_us": [0-9.]*[1-9]' "$tmpb" && grep -q "smallest message: .* x the barrier; largest: x_sol" "$out"; then
    ok "bench allreduce: speed of light and barrier, per row"; else bad "bench allreduce: speed of light and barrier"; fi
rm -f "$tmpb"
expect 0 " 12288 " "bench allreduce exact, double" -- bench allreduce --ranks 2 --bytes 12K --algo exact --type double --iters 2
expect 2 "expected one of float|double" "bench allreduce bad type" -- bench allreduce --type half
expect 0 "x_ddp x_verify" "bench run, with the plain fwd+bwd and unverified DDP baselines" -- bench run --ranks 2 --model mlp:4-8-3 --model branchy --iters 1
expect 2 "unknown implementation" "bench run with a bad impl" -- bench run --impl nothing
tmpj=$(mktemp -d) || exit 99
expect 0 "x_verify" "bench run --json" -- bench run --ranks 2 --model mlp:4-8-3 --model branchy --iters 1 --json "$tmpj/run.json"
if [ "$(jfield "$tmpj/run.json" '([m["model"] for m in d["models"]], d["ranks"], d["iters"], sorted(d["models"][0]))' 2>&1)" = \
    "(['mlp:4-8-3', 'branchy'], 2, 1, ['comm_hidden', 'costs', 'cpu_max', 'ddp_ms', 'in_collectives', 'model', 'params', 'plain_ms', 'run_ms', 'step_ms', 'steps', 'x_ddp', 'x_verify'])" ]; then
    ok "bench run --json: every model with every figure"; else bad "bench run --json: $(head -c 400 "$tmpj/run.json")"; fi
# ... and where a verified micro-step goes, one figure per cost (verify_cost), each a number
if [ "$(jfield "$tmpj/run.json" '(sorted(d["models"][0]["costs"]), all(isinstance(v, (int, float)) for m in d["models"] for v in m["costs"].values()))' 2>&1)" = \
    "(['agreement_ms', 'bound_ms', 'compare_ms', 'impl_ms', 'output_ms', 'ref_check_ms', 'ref_sums_ms', 'shared_test_ms'], True)" ]; then
    ok "bench run --json: the costs of a verified micro-step"; else bad "bench run --json costs: $(jfield "$tmpj/run.json" 'd["models"][0].get("costs")' 2>&1)"; fi
expect 2 "creates only the last component of an output path" "bench run --json under a missing directory" -- \
    bench run --ranks 2 --model mlp:4-8-3 --iters 1 --json "$tmpj/missing/run.json"
rm -rf "$tmpj"
expect 0 "x_portable" "bench model --portable-math: the portable kernels' cost beside OpenBLAS's, same run" -- \
    bench model --model mlp:4-8-3 --iters 1 --warmup 0 --portable-math
expect 2 "up to at most 1G" "bench allreduce too large" -- bench allreduce --bytes 2G
expect 2 "Usage: ddpsim bench" "bench without a kind" -- bench

# Interrupt a long run: exit 128+signal, and nothing left behind. Job control
# (set -m) so the background job does not start with SIGINT ignored.
set -m
none_with_marker() { ! pgrep -f -- "--jitter-seed $1" >/dev/null; }
for sig in TERM INT; do
    marker=$((900000000 + $$))
    "$DDPSIM" selfcheck --ranks 4 --count 4M --iters 10000 --jitter-seed "$marker" >"$out" 2>"$err" &
    pid=$!
    # Mid-run: once its 4 ranks are there (not after a guessed sleep, which a loaded machine outlasts).
    wait_until 120 children_at_least "$pid" 4 || echo "cli.sh: the 4 ranks did not appear" >&2
    kill -s "$sig" "$pid"
    wait "$pid"
    got=$?
    want=$([ "$sig" = TERM ] && echo 143 || echo 130)
    # A function, not `sh -c "! pgrep -f ..."`: that shell's own command line holds the pattern, so the wait
    # never ended before its deadline (30 s a signal, every run of this script).
    wait_until 30 none_with_marker "$marker"
    left=$(pgrep -f -- "--jitter-seed $marker" | wc -l)
    if [ "$got" -eq "$want" ] && [ "$left" -eq 0 ] && grep -q "interrupted" "$err"; then
        ok "SIG$sig mid-run: exit $got, no rank left"
    else
        bad "SIG$sig mid-run: exit $got (want $want), $left processes left"
    fi
done
# ... and --mutants (hundreds of runs): the first interrupted run stops them all.
"$DDPSIM" --mutants >"$out" 2>"$err" &
pid=$!
wait_until 120 children_at_least "$pid" 1 || echo "cli.sh: --mutants started no run" >&2
kill -s TERM "$pid"
wait "$pid"
got=$?
if [ "$got" -eq 143 ] && grep -q "interrupted by signal 15 at .*: the rest was not run" "$out"; then
    ok "SIGTERM during --mutants: exit 143 at once, the rest not run"
else
    bad "SIGTERM during --mutants: exit $got"
fi
# A signal after the ranks ended but before the verdict is printed wins: exit 143, said, and no verdict (it
# exited 0 with a full PASS). The report goes to a FIFO this script does not read yet, and its 3000-line table
# (240 KiB) is more than a pipe holds, so ddpsim cannot reach its verdict before the signal; the signal is sent once
# its ranks have come and gone. The table's size does not depend on the model: the smallest mlp keeps the run short
# (a wider one took a minute under the sanitizers).
no_children() { [ -z "$(pgrep -P "$1")" ]; }
fifo=$scratch/report.fifo
mkfifo "$fifo"
"$DDPSIM" --ranks 2 --model mlp:8-8-4 --schedule "3000*(fwd bwd grab)" --json "$scratch/int.json" >"$fifo" 2>"$err" &
pid=$!
exec 9<"$fifo"
{ wait_until 120 children_at_least "$pid" 2 && wait_until 120 no_children "$pid"; } ||
    echo "cli.sh: the ranks did not come and go" >&2
kill -s TERM "$pid"
cat <&9 >"$out"
exec 9<&-
wait "$pid"
got=$?
if [ "$got" -eq 143 ] && ! grep -q "^# verdict:" "$out" && grep -q "interrupted by signal 15 (Terminated) before the verdict" "$err"; then
    ok "SIGTERM after the ranks, before the verdict: exit 143, said, no verdict"
else
    bad "SIGTERM after the ranks, before the verdict: exit $got"
fi
if [ "$(jfield "$scratch/int.json" '(d["result"], d["verdict"], d["exit_code"])' 2>&1)" = "('interrupted', None, 143)" ]; then
    ok "... and its --json says interrupted, 143"
else
    bad "... its --json: $(head -c 300 "$scratch/int.json")"
fi
set +m

# The leak check fires on a leak: a segment named after a process that is gone (a prefix of this script's own,
# so that no test beside this one reads it as its leak).
sh -c 'exit 0' &
gone=$!
wait $gone
if [ -d /dev/shm ] && : >"/dev/shm/selftest$$-$gone-0"; then
    found=$(shm_orphans "selftest$$")
    rm -f "/dev/shm/selftest$$-$gone-0"
    if [ "$found" = "selftest$$-$gone-0" ]; then ok "the leak check names a gone process's segment"; else bad "the leak check missed a gone process's segment: '$found'"; fi
fi
left=$(shm_new_orphans ddpsim "$orphans_before")
if [ -z "$left" ]; then ok "no /dev/shm segment left"; else bad "segments left in /dev/shm: $left"; fi

finish
