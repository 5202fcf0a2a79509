// Package decide is what the executor decides for each command, as pure
// functions: given the command, the key's record and the entity's state
// as they are at the command's position, the action's policy and the time,
// it says what happens — execute, replay, inherit, reject, hold, forward,
// deadletter — without I/O, locks or clocks. The executor (package
// consumer) is the I/O around it: fetch, look up, decide, perform, write.
//
// The tables, each a []Row tried in order, and their functions:
//
//   - RouteRows (Route): a polled record, before any record of its key is
//     read: deadletter, forward, or dispatch to its entity;
//   - Rows (Command, Sized): a command in its entity's single flight;
//   - DecisionRows (Operator): resolve, approve, release;
//   - ReconcileRows (Reconcile, Reconciled): reconcile requests, and
//     DueRows (Due): which records the reconciler asks about;
//   - InheritRows (InFlight, Inheriting): executions left in progress;
//   - AnswerRows (Performed, Panicked): what an execution's end leaves.
//
// docs/guarantees.md#decision-table shows every table; TestDocsTable keeps
// them equal, and each table's test covers every row.
package decide
