package main

// edit replaces Old, which must occur exactly once in File, by New: a
// mutant whose Old no longer matches the code is stale, and the run (and
// TestMutantsApply, in make test) says so instead of testing nothing.
type edit struct {
	File, Old, New string
}

// mutant is one guarantee removed on purpose. Run is a -run pattern of the
// tests expected to catch it (the fast path; -full runs every test of
// Pkgs); Pkgs are the packages, relative to the module root.
type mutant struct {
	Name      string
	Guarantee string
	Edits     []edit
	Pkgs      []string
	Run       string
	// Row marks a mutant that removes a row of the decision table
	// (internal/decide): it must fail a table test and the simulation.
	Row bool
}

const (
	consumerPkg = "./consumer/"
	decidePkg   = "./internal/decide/"
	// sim is the simulation of whole histories (consumer/history_test.go).
	sim = "TestSeededHistories"
)

// guarantees are the 15 removals of issue 19, each caught by at least two
// independent tests of make test. Some guarantees are also removed on the
// other side (the executor's or the audit's) as a separate mutant.
var guarantees = []mutant{
	{
		Name: "dedupe-lookup", Guarantee: "G2: a key's record is found in the dedupe index",
		Edits: []edit{{"consumer/job.go",
			"	rec, raw, ok, err := j.lookupStore(entity, key)\n",
			"	rec, raw, ok, err := j.lookupStore(entity, key)\n	ok = false\n"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestKeyScopedToEntity|TestReleaseMakesKeyNewWork|TestDataDirLossRestoresFromJournal|TestRepeatReuseUnknownAndDeadletter|TestRetentionAndKeyMemory|TestUnresolvedThenReconciled|" + sim,
	},
	{
		Name: "key-reuse-check", Guarantee: "G2: a key reused with other data is rejected idempotency_key_reused",
		Edits: []edit{{"internal/decide/command.go",
			"		case rec.Fingerprint != cmd.Fingerprint:",
			"		case false && rec.Fingerprint != cmd.Fingerprint:"}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestCommandRows|TestKeyScopedToEntity|TestRepeatReuseUnknownAndDeadletter|TestReleaseDoesNotReArmRedeliveredCommands|" + sim,
	},
	{
		// Every command starts a worker of its own on the entity's
		// queue: two commands of one entity run at once.
		Name: "entity-lanes", Guarantee: "G1: one entity's commands run one at a time, in order",
		Edits: []edit{
			{"consumer/pipeline.go",
				"	if !running {\n		p.workers.Add(1)\n		p.startEntity(entityTask{cmd.Subject, st})",
				"	if true {\n		p.workers.Add(1)\n		p.startEntity(entityTask{cmd.Subject, st})"},
			{"consumer/pipeline.go",
				"		q := p.mu.queues[entity]\n		if len(q.items) == 0 && q.nSkipped() > 0",
				"		q := p.mu.queues[entity]\n		if q == nil {\n			p.mu.Unlock()\n			return\n		}\n		if len(q.items) == 0 && q.nSkipped() > 0"},
		},
		Pkgs: []string{consumerPkg},
		Run:  "TestSlowEntityDoesNotBlockOthers|TestFaultGraceConfirmWaitsForDeadlinePlusDrift|TestPaymentsProfileEndToEnd|TestHotEntityDoesNotBlockItsPartition|TestEntityLanesNeverOverlap|" + sim,
	},
	{
		Name: "blind-retry", Guarantee: "G3: an ambiguous answer is confirmed, never retried blind",
		Edits: []edit{{"internal/connectors/effect/perform.go",
			"	switch {\n	case canConfirm:\n		return StepConfirm\n	case idempotentByKey:\n		return StepReexecute\n	}\n	return StepUnresolved",
			"	return StepReexecute"}},
		Pkgs: []string{"./internal/connectors/effect/", consumerPkg},
		Run:  "TestNextStepIsPerformsRule|TestPerformRules|TestUnresolvedThenReconciled|TestEvidencePaths|TestPaymentsProfileEndToEnd",
	},
	{
		// A Confirm's NotFound is trusted once the deadline plus the
		// clock drift has passed, the lookup's lag forgotten.
		Name: "lookup-lag", Guarantee: "G3: a lookup's \"not found\" within its lookup_lag after the attempt's deadline is asked again, not trusted",
		Edits: []edit{{"internal/connectors/effect/perform.go",
			"	settled := drifted.Add(r.p.LookupLag)\n",
			"	settled := drifted\n"}},
		Pkgs: []string{"./internal/connectors/effect/", "./internal/connectors/http/"},
		Run:  "TestConfirmWaitsForTheLookupLag|TestReconcileWaitsForTheLookupLag|TestPaymentsProfileLookupLag",
	},
	{
		Name: "fasthttp-unanswered-is-sent", Guarantee: "G3: a request written over fasthttp and not answered is ambiguous (confirmed), not \"not sent\" (retried)",
		Edits: []edit{{"internal/connectors/http/fast.go",
			"	if err != nil && !answered {\n		return true, false, f.cause(ctx, err)",
			"	if err != nil && !answered {\n		return false, false, f.cause(ctx, err)"}},
		Pkgs: []string{"./internal/connectors/http/"},
		Run:  "TestClosedKeptAliveConnectionIsNotResent|TestCancelEndsASentRequest|TestPerform|TestTimedOutConnectionNotReused|TestPaymentsProfile",
	},
	{
		Name: "reconcile-without-confirm", Guarantee: "G3: an inherited or unresolved execution is confirmed before it runs again",
		Edits: []edit{{"internal/connectors/effect/perform.go",
			"	res, d, done := r.confirm(ctx, req)\n	if done {\n		return d\n	}\n	if res.Kind == connectors.Succeeded {\n		return Decision{Outcome: schemas.StatusSucceeded, Result: res.Result, Attempts: req.Attempt, EstablishedBy: schemas.EstablishedByConfirmation}\n	}\n	req.Attempt++ // NotFound",
			"	req.Attempt++ // NotFound"}},
		Pkgs: []string{"./internal/connectors/effect/", consumerPkg},
		Run:  "TestReconcile|TestConfirmWaitsForDeadlineBeforeTrustingNotFound|TestUnresolvedThenReconciled|TestEvidencePaths|TestEvidenceCrashBeforeConfirmation|TestFaultGraceConfirmWaitsForDeadlinePlusDrift|TestInterruptedReconcileAttemptIsInherited|TestReconcilerConfirmationConsumedAgain",
	},
	{
		// The memo's tag covers half of a record's bytes: a record changed
		// in the other half takes the unchanged record's facts.
		Name: "audit-memo-bytes", Guarantee: "G5: the audit takes a record from its memo only for the same bytes (a tampered outcome under a matching hash is decoded and checked)",
		Edits: []edit{{"audit/memo.go",
			"	m.gcm.Seal(t[:0], m.nonce[:], nil, raw)",
			"	m.gcm.Seal(t[:0], m.nonce[:], nil, raw[:len(raw)/2])"}},
		Pkgs: []string{"./audit/"},
		Run:  "TestDecodeOutcomeKnownRecord|TestRecordMemoFindsOnlyItsBytes|TestRecordMemoBound|TestRunOutcomesOfJournalRecords",
	},
	{
		Name: "hash-chain", Guarantee: "G5: the audit checks each journal record's prev_hash",
		Edits: []edit{{"audit/check.go",
			"	if cs.havePrev && rec.PrevHash != cs.prev {",
			"	if false && cs.havePrev && rec.PrevHash != cs.prev {"}},
		Pkgs: []string{"./audit/"},
		Run:  "TestCheck$|TestCheckChainIgnoringPrevHash|TestStreamingOrderDoesNotMatter|TestAuditAgainstExecutor",
	},
	{
		Name: "intent-before-effect", Guarantee: "G1: no attempt leaves before its intent (in_progress, deadline) committed",
		Edits: []edit{{"consumer/job.go",
			"	if x.a.effectless {\n		return nil\n	}\n	in := x.rec",
			"	if true {\n		return nil\n	}\n	in := x.rec"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestFaultIntentBeforeEffect|TestIntentSkippedOnlyWhenEffectless|TestFencingTokenGrowsPerAttempt|TestEvidenceCrashBeforeConfirmation|TestRedeliveredApproveAnsweredApplied",
	},
	{
		Name: "intent-held-progress", Guarantee: "G1/G3: the stored Progress never passes an intent that is not in Pebble, so a restart finds it",
		Edits: []edit{{"consumer/partstate.go",
			"	st.held.holds = st.held.holds[i:]\n	if len(st.held.holds) == 0 {",
			"	st.held.holds = st.held.holds[i:]\n	if true {"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestCrashAfterIntentIsInherited|TestEvidenceCrashBeforeConfirmation|TestWaitingCommandSurvivesRestart",
	},
	{
		Name: "kip447-generation", Guarantee: "G1/G4: the offset commit carries the group generation (KIP-447), fencing a zombie",
		Edits: []edit{{"consumer/committer.go",
			"	req.Generation = gen\n	req.MemberID = member\n",
			"	req.Generation = -1\n	req.MemberID = \"\"\n"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestFenceRefusesZombieWithStaleGeneration|TestOffsetCommitsCarryTheGeneration|TestFaultShortSessionHoldsMembership|TestRevocationDrainsAndCommits|TestFaultNetworkCutAndStall",
	},
	{
		Name: "deadline-grace", Guarantee: "G1: an inherited execution is confirmed only after its deadline plus --clock-drift",
		Edits: []edit{{"consumer/job.go",
			"		wait := time.Until(prev.Deadline.Add(j.e.cfg.ClockDrift))",
			"		wait := 0 * time.Until(prev.Deadline.Add(j.e.cfg.ClockDrift))"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestFaultGraceConfirmWaitsForDeadlinePlusDrift|TestFaultGraceIdempotentByKeyWithoutConfirm|TestInterruptedReconcileAttemptIsInherited|TestEvidenceCrashBeforeConfirmation|TestRedeliveredApproveAnsweredApplied",
	},
	{
		Name: "unique-by-reject", Guarantee: "governance: a second execution of a unique_by tuple is rejected duplicate_business_key",
		Edits: []edit{{"internal/decide/command.go",
			"		if !hold {\n			d := reject(\"duplicate-rejected\"",
			"		if !hold {\n			return Decision{Row: \"execute\", Verdict: Execute, UniqueKey: uk}\n		}\n		if false {\n			d := reject(\"duplicate-rejected\""}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestCommandRows|TestUniqueByRejectAndHold|TestUniqueByWhileFirstInFlight|TestOverlayUniqueFollowsPending|" + sim,
	},
	{
		Name: "unique-by-hold", Guarantee: "governance: with on_duplicate: hold a suspected duplicate waits for an operator",
		Edits: []edit{{"internal/decide/command.go",
			"		return Decision{Row: \"duplicate-held\", Verdict: Hold,",
			"		return Decision{Row: \"duplicate-held\", Verdict: Execute,"}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestCommandRows|TestUniqueByRejectAndHold|TestRedeliveredApproveAnsweredApplied|TestHeldDuplicateWaitsForAnOperator|TestApprovalConsumedAgain|" + sim,
	},
	{
		Name: "hmac-check", Guarantee: "control: an HMAC-signed decision is checked against its key",
		Edits: []edit{{"schemas/control.go",
			"	if !hmac.Equal([]byte(want), []byte(c.ControlSig)) {",
			"	if false && !hmac.Equal([]byte(want), []byte(c.ControlSig)) {"}},
		Pkgs: []string{"./schemas/", "./audit/", consumerPkg},
		Run:  "TestControlSignature|TestDecisionsSigned|TestUniqueByRejectAndHold|TestReleaseMakesKeyNewWork|TestEd25519DecisionsVerifierOnly",
	},
	{
		// Not a Row mutant: the simulation sends no decision past its
		// not_after; the table test and the executor's end-to-end test
		// catch it.
		Name: "op-not-after", Guarantee: "control: an operator decision past its signed not_after is refused rejected expired",
		Edits: []edit{{"internal/decide/control.go",
			"	if !req.NotAfter.IsZero() && in.Now.After(req.NotAfter) {",
			"	if false && !req.NotAfter.IsZero() {"}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestOperatorRows|TestOpExpiryReplayedDecisionRefused",
	},
	{
		Name: "journal-gap-hold", Guarantee: "G2: a partition whose journal lost records younger than key_memory is held",
		Edits: []edit{{"consumer/restore.go",
			"	if age >= e.retention.memory {",
			"	if true || age >= e.retention.memory {"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestJournalKeptCompleteAndGapsHeld|TestJournalGapHoldsUntilAccepted|TestEpochAndTokensNeverGoBackAfterRetention",
	},
	{
		Name: "deadletter", Guarantee: "G4: an undecodable command goes to the deadletter topic",
		Edits: []edit{{"consumer/job.go",
			"	j.add(emit{deadletter: r, reason: reason})\n",
			"	_ = reason\n"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestRepeatReuseUnknownAndDeadletter|TestMalformedCommandsDeadlettered|TestNotableAnswersAreLogged",
	},
	{
		Name: "store-failure", Guarantee: "G2/G4: an executor whose dedupe index failed stops taking work and leaves its group",
		Edits: []edit{
			{"consumer/executor.go", "		case <-e.store.Failure():\n", "		case <-make(chan struct{}):\n"},
			{"consumer/executor.go", "		ferr := e.store.Failed()\n", "		ferr := error(nil)\n"},
		},
		Pkgs: []string{consumerPkg},
		Run:  "TestFaultDisk$|TestFaultDiskWhileIdle|TestFaultCorruptDataDir",
	},
	// The same guarantees removed on the other side.
	{
		Name: "hash-chain-executor", Guarantee: "G5: the executor chains each journal record to the one before",
		Edits: []edit{{"consumer/committer.go",
			"	rec.PrevHash = st.chain.hash\n",
			"	rec.PrevHash = \"\"\n"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestKeyScopedToEntity|TestReleaseMakesKeyNewWork|TestUniqueByWhileFirstInFlight",
	},
	{
		Name: "journal-retention-check", Guarantee: "G2: an executor refuses a journal whose retention is shorter than key_memory + dedupe_retention",
		Edits: []edit{{"consumer/topics.go",
			"	if len(errs) > 0 {\n		return fmt.Errorf(\"consumer: topics cannot keep the journal complete",
			"	if false && len(errs) > 0 {\n		return fmt.Errorf(\"consumer: topics cannot keep the journal complete"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestJournalKeptCompleteAndGapsHeld|TestJournalRetentionFollowsKeyMemory",
	},
	{
		Name: "fence-membership", Guarantee: "G1: work of a partition assigned to an earlier membership of this process is not committed under a later one",
		Edits: []edit{{"consumer/committer.go",
			" && !st.lost.Load() && st.member == member\n}",
			" && !st.lost.Load()\n}"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestWorkOfAnEarlierMembershipIsDropped|TestAnswersOfAnEarlierMembershipAreDropped",
	},
	{
		Name: "fence-marker-membership", Guarantee: "G1: an epoch marker is not committed under a later membership than its restore's, nor after its restore gave up",
		Edits: []edit{{"consumer/committer.go",
			"case en.marker != nil && (en.marker.member != member || en.marker.abandoned.Load()):",
			"case false:"}},
		Pkgs: []string{consumerPkg},
		Run:  "TestMarkersOfAnEarlierMembershipAreDropped|TestMarkersOfAbandonedRestoresAreDropped",
	},
	{
		Name: "lookup-sees-writes", Guarantee: "G2: a lookup sees every record committed before it (a reused iterator is dropped after a write)",
		Edits: []edit{{"internal/dedupe/failure.go",
			"	defer s.points.wrote()\n",
			"	defer func() {}()\n"}},
		Pkgs: []string{"./internal/dedupe/"},
		Run:  "TestLookupSeesEveryWrite|TestLookupSeesConcurrentCommits",
	},
	{
		Name: "presence-add", Guarantee: "G2: a committed record's key is in the presence filter before the record is visible",
		Edits: []edit{{"internal/dedupe/batch.go",
			"		b.s.present.add(key)\n",
			"		_ = key\n"}},
		Pkgs: []string{"./internal/dedupe/", consumerPkg},
		Run:  "TestPresenceEveryWritePathFindsItsKey|TestPresencePastTheCap|TestLookupSeesEveryWrite|TestDataDirLossRestoresFromJournal",
	},
	{
		Name: "prefetch-writes", Guarantee: "G2: a record read ahead of its lookup is used only if no write of its key returned since",
		Edits: []edit{{"internal/dedupe/batch.go",
			"		b.s.recWrites.wrote(key)\n",
			"		_ = key\n"}},
		Pkgs: []string{"./internal/dedupe/"},
		Run:  "TestLookupPrefetchedSeesLaterWrites|TestLookupPrefetchedSeesConcurrentCommits",
	},
	{
		Name: "presence-scan", Guarantee: "G2: a reopened store's presence filter holds every stored record key",
		Edits: []edit{{"internal/dedupe/presence.go",
			"		p.addBytes(it.Key()[len(prefixRecord):])\n",
			"		_ = p\n"}},
		Pkgs: []string{"./internal/dedupe/", consumerPkg},
		Run:  "TestPresenceReopenFindsStoredKeys|TestReopenPersistence|TestRepeatReplaysStoredBytes",
	},
}

// rows remove one row of the decision table each (internal/decide):
// the table tests and the simulation must fail.
var rows = []mutant{
	row("row-key-in-flight", "	if in.ClaimedByOther {", "	if false && in.ClaimedByOther {", "TestKeyScopedToEntity"),
	row("row-key-expired", "		case rec.Status.Final() && rec.FinishedAt != nil && (in.Stub ||", "		case false && rec.Status.Final() && rec.FinishedAt != nil && (in.Stub ||", "TestRetentionAndKeyMemory|TestStubNeverReplayedAfterRetentionRaised"),
	row("row-replay", "			return Decision{Row: \"replay\", Verdict: Replay}", "			return Decision{Row: \"replay\", Verdict: Execute}", "TestRepeatReuseUnknownAndDeadletter|TestApprovalConsumedAgain|TestResolutionConsumedAgain|TestReconcilerConfirmationConsumedAgain"),
	row("row-inherit", "			return Decision{Row: \"inherit\", Verdict: Inherit}", "			return Decision{Row: \"inherit\", Verdict: Execute}", "TestFaultGraceConfirmWaitsForDeadlinePlusDrift"),
	row("row-control", "	if schemas.IsDecision(cmd.Type) || cmd.Type == schemas.TypeReconcile {", "	if false {", "TestReleaseMakesKeyNewWork"),
	row("row-expired", "	if cmd.Deadline != nil && in.Now.After(*cmd.Deadline) {", "	if false && cmd.Deadline != nil {", "TestNotableAnswersAreLogged"),
	row("row-source-not-allowed", "	if !a.SourceAllowed(cmd.Source) {", "	if false && !a.SourceAllowed(cmd.Source) {", "TestNotableAnswersAreLogged"),
	row("row-invalid-data", "	if err := a.ValidateData(cmd.Data); err != nil {", "	if err := a.ValidateData(cmd.Data); false && err != nil {", "TestPaymentsProfileEndToEnd"),
	row("row-version-conflict", "	if cmd.ExpectedVersion != nil && *cmd.ExpectedVersion != in.Version {", "	if false && cmd.ExpectedVersion != nil {", "TestPaymentsProfileEndToEnd"),
	row("row-unique-field-missing", "	if err != nil {\n		return reject(\"unique-field-missing\"", "	if false && err != nil {\n		return reject(\"unique-field-missing\"", "TestUniqueByRejectAndHold"),
	row("row-unique-lookup", "	if uk != \"\" && !in.HolderKnown {", "	if false && !in.HolderKnown {", "TestUniqueByRejectAndHold"),
	row("row-execute", "	return Decision{Row: \"execute\", Verdict: Execute, UniqueKey: uk}\n}", "	return Decision{Row: \"execute\", Verdict: Replay, UniqueKey: uk}\n}", "TestKeyScopedToEntity"),
	{
		Name: "row-release-position", Guarantee: "decision table: a release frees the key only for the commands after it", Row: true,
		Edits: []edit{{"internal/decide/position.go",
			"		if rec.Command.Partition == pos.Partition && !rel.After(pos.Offset) {",
			"		if false {"}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestSeen|TestReleaseDoesNotReArmRedeliveredCommands|" + sim,
	},
	{
		Name: "row-refusal-final", Guarantee: "decision table: a rejection of a command that never started answers that command only", Row: true,
		Edits: []edit{{"internal/decide/position.go",
			"	if found && retryable(&rec) && rec.Command.Partition == pos.Partition && pos.Offset > rec.Command.Offset {",
			"	if false {"}},
		Pkgs: []string{decidePkg, consumerPkg},
		Run:  "TestSeen|TestRefusalDoesNotBurnTheKey|" + sim,
	},
	{
		Name: "route-forward", Guarantee: "routing table: a command on another partition than its entity's is forwarded, never executed where it landed",
		Edits: []edit{{"internal/decide/route.go", "	if in.Partition != in.Want {", "	if false && in.Partition != in.Want {"}},
		Pkgs:  []string{decidePkg, consumerPkg},
		Run:   "TestRouteRows|TestNotableAnswersAreLogged|TestLagCountsUnansweredCommandsOnly|TestForwardTooLargeIsAnsweredNotStuck",
	},
	{
		Name: "row-reconcile-not-unresolved", Guarantee: "reconcile table: a reconcile request settles only an unresolved record", Row: true,
		Edits: []edit{{"internal/decide/reconcile.go", "	case t.Status != schemas.StatusUnresolved:", "	case false:"}},
		Pkgs:  []string{decidePkg, consumerPkg},
		Run:   "TestReconcileRows|" + sim + "|TestReconcilerConfirmationConsumedAgain|TestUnresolvedThenReconciled",
	},
	{
		Name: "inherit-not-done", Guarantee: "inherit table: an inherited execution whose last attempt was answered \"not done\" is attempted again at once, not left to a confirmation",
		Edits: []edit{{"internal/decide/inherit.go", "	case lastNotDone(rec):", "	case false:"}},
		Pkgs:  []string{decidePkg, consumerPkg},
		Run:   "TestInheritRows|TestWaitingCommandSurvivesRestart|TestOutageRiddenOut|" + sim,
	},
	opRow("row-op-refused", "	if err := in.SignatureErr; err != nil {", "	if err := in.SignatureErr; false && err != nil {", "TestUniqueByRejectAndHold|TestReleaseMakesKeyNewWork"),
	opRow("row-op-malformed", "err != nil || req.Key == \"\" || req.Reason == \"\" {", "err != nil {", "TestUniqueByRejectAndHold"),
	opRow("row-op-applied", "	if cmd.Type == schemas.TypeApprove && t != nil && t.Resolution != nil && t.Resolution.DecisionID == cmd.ID {", "	if false {", "TestRedeliveredApproveAnsweredApplied|TestApprovalConsumedAgain"),
	opRow("row-op-not-applicable", "	if t == nil || !slices.Contains(want, t.Status) {", "	if t == nil || false && !slices.Contains(want, t.Status) {", "TestUniqueByRejectAndHold|TestReleaseMakesKeyNewWork"),
	opRow("row-op-action-gone", "		if !in.ActionConfigured {", "		if false && !in.ActionConfigured {", "TestUniqueByRejectAndHold"),
}

func row(name, old, new, run string) mutant {
	return mutant{Name: name, Guarantee: "decision table row " + name[len("row-"):], Row: true,
		Edits: []edit{{"internal/decide/command.go", old, new}},
		Pkgs:  []string{decidePkg, consumerPkg}, Run: "TestCommandRows|" + sim + "|" + run}
}

func opRow(name, old, new, run string) mutant {
	return mutant{Name: name, Guarantee: "operator decision row " + name[len("row-op-"):], Row: true,
		Edits: []edit{{"internal/decide/control.go", old, new}},
		Pkgs:  []string{decidePkg, consumerPkg}, Run: "TestOperatorRows|" + sim + "|" + run}
}

// all is every mutant, the guarantees first.
func all() []mutant { return append(append([]mutant{}, guarantees...), rows...) }
