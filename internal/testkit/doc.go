// Package testkit is the test scaffolding the module's tests share: the addresses of the test
// servers and the clients they need (Need, NeedCommand), the producer of the CDC benchmarks and
// kill tests (Writer), the CDC benchmarks' measurements (Drain, Latency, CompareDrains) and
// tests of relay processes
// (StartChild, KillMain, FileSink, the kill points SignalSink and SettleSignal, RunKill).
package testkit
