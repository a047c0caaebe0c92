// Package argv runs a program from an argument vector: no shell, no expansion, a timeout that
// kills the whole process group, and output captured up to a bound.
//
// Consumers depend on the Runner interface; Exec is the real implementation and Fake a scripted
// one for unit tests.
package argv
