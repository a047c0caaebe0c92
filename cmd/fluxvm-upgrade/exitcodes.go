package main

import (
	"errors"

	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/durable"
)

// Exit codes (documented in docs/fluxvm-upgrade.md).
const (
	exitOK                 = 0
	exitError              = 1  // anything else (I/O, hook infrastructure, ...)
	exitUsage              = 2  // bad command line
	exitInvalidPlan        = 3  // plan does not decode or validate
	exitLocked             = 4  // another process holds the transaction lock
	exitPlanModified       = 5  // plan's canonical hash differs from the one the transaction began with
	exitRolledBack         = 6  // transaction ended rolled-back
	exitManualIntervention = 7  // transaction ended manual-intervention
	exitProbeFailed        = 8  // live checks failed; nothing was changed
	exitEvidence           = 9  // evidence does not verify (files or signature)
	exitJournalCorrupt     = 10 // torn or corrupt journal: not trusted, nothing done
	exitTxState            = 11 // transaction exists (run) / does not exist (resume, rollback) / already committed (rollback)
	exitRunning            = 12 // interrupted by a signal: the transaction is still running (resume or rollback it)
	exitEvidencePending    = 13 // status: terminal transaction whose evidence is not written yet (resume or reconcile writes it)
)

func exitFor(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, upgrade.ErrInvalidPlan):
		return exitInvalidPlan
	case errors.Is(err, durable.ErrLocked):
		return exitLocked
	case errors.Is(err, upgrade.ErrPlanModified):
		return exitPlanModified
	case errors.Is(err, upgrade.ErrProbeFailed):
		return exitProbeFailed
	case errors.Is(err, evidence.ErrMismatch), errors.Is(err, evidence.ErrBadSignature), errors.Is(err, evidence.ErrNoManifest):
		return exitEvidence
	case errors.Is(err, upgrade.ErrInterrupted):
		return exitRunning
	case errors.Is(err, upgrade.ErrJournalCorrupt):
		return exitJournalCorrupt
	case errors.Is(err, upgrade.ErrTransactionExists), errors.Is(err, upgrade.ErrNoTransaction), errors.Is(err, upgrade.ErrAlreadyCommitted),
		errors.Is(err, upgrade.ErrNotRetryable):
		return exitTxState
	}
	return exitError
}

func exitForState(state string) int {
	switch state {
	case upgrade.StateCommitted:
		return exitOK
	case upgrade.StateRolledBack:
		return exitRolledBack
	case upgrade.StateManualIntervention:
		return exitManualIntervention
	}
	return exitRunning
}
