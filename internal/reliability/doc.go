// Package reliability holds the reliability tests that cross adapters: the churn test
// (polling relays started and gracefully stopped at random on every database, checked for
// losses, duplicates and order regressions), the fault-injection tests (toxiproxy between
// the relays and their database, and between the relays and the SQS emulator) and the crash
// matrix (polling relay processes killed at chosen points on every database; SQS consumer
// processes killed before and after their inbox commit). RELIABILITY.md
// at the repository root lists what they prove, their figures and the commands that measured
// them.
//
// OUTBOXKIT_CHURN_SECONDS sets the churn duration (default 10) and OUTBOXKIT_OUTAGE_SECONDS
// the length of each injected fault (default 3); the long run is 40 and 10.
// OUTBOXKIT_CRASH_RUNS sets how many times each crash case runs (default 2).
package reliability
