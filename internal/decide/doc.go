// Package decide is what the executor decides for each command, as pure
// functions: given the command, the key's record and the entity's state
// as they are at the command's position, the action's policy and the time,
// it says what happens — execute, replay, inherit, reject, hold — without
// I/O, locks or clocks. The executor (package consumer) is the I/O around
// it: fetch, look up, decide, perform, write.
//
// The decision table in docs/guarantees.md is this package's Rows; a test
// keeps the two equal.
package decide
