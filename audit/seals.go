package audit

// CheckJournalSigned: every journal record is covered by a transaction
// seal signed by a trusted executor key (docs/trust.md#signed-transactions).
// Checked only when trusted keys are given (Options.Trusted).
const CheckJournalSigned = "journal_signed"
