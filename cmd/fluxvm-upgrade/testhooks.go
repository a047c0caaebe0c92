//go:build fluxvmtest

package main

// This file exists only in binaries built with -tags fluxvmtest (the crash harness builds one).
// It is never part of a release build, so these environment variables have no effect there:
//
//	FLUXVM_UPGRADE_TEST_FAKE_BPF=PATH   use bpfmap.Fake persisted in PATH instead of the kernel
//	FLUXVM_UPGRADE_TEST_FAILPOINT=KEY   SIGKILL this process right after the journal record KEY
//	                                    (e.g. "step-done:web:apply", "rollback-begin", "end",
//	                                    "final:journal.final.json") is durably written
//	FLUXVM_UPGRADE_TEST_FAILPOINT_ACTION=stop
//	                                    SIGSTOP instead of SIGKILL at that point: the process
//	                                    carries on when the test sends SIGCONT (fault tests
//	                                    change the filesystem at an exact point of a run)
//
// and it adds the hidden helper command `fake-map` that hooks use to act on the fake maps.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/fluxvm/upgrade"
)

func init() {
	if path := os.Getenv("FLUXVM_UPGRADE_TEST_FAKE_BPF"); path != "" {
		storeFactory = func() (bpfmap.Store, bool, error) {
			f, err := bpfmap.NewFakeFile(path)
			return f, false, err
		}
	}
	if key := os.Getenv("FLUXVM_UPGRADE_TEST_FAILPOINT"); key != "" {
		// A misspelled failpoint would never fire and a crash test would pass without a crash.
		if err := checkFailpoint(key); err != nil {
			fmt.Fprintf(os.Stderr, "fluxvm-upgrade (test build): FLUXVM_UPGRADE_TEST_FAILPOINT: %v\n", err)
			os.Exit(exitUsage)
		}
		sig := syscall.SIGKILL
		switch a := os.Getenv("FLUXVM_UPGRADE_TEST_FAILPOINT_ACTION"); a {
		case "", "kill":
		case "stop":
			sig = syscall.SIGSTOP
		default:
			fmt.Fprintf(os.Stderr, "fluxvm-upgrade (test build): FLUXVM_UPGRADE_TEST_FAILPOINT_ACTION: unknown action %q (want kill or stop)\n", a)
			os.Exit(exitUsage)
		}
		afterRecord = func(k string) {
			if k != key {
				return
			}
			if sig == syscall.SIGSTOP {
				stopHere()
				return
			}
			_ = syscall.Kill(os.Getpid(), sig)
			select {} // never continue past the failpoint
		}
	}
	extraCommands = append(extraCommands, fakeMapCmd)
}

// stopHere stops the process and returns once it is continued. The stop signal may be taken by
// another thread and this one would run on until the group stop reaches it: waiting for SIGCONT
// keeps the engine exactly at the failpoint.
func stopHere() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}

var failpointComponent = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// checkFailpoint accepts only names the engine can reach: a journal record's Key(), "ran:C:S"
// (a step's action finished, its outcome not yet journaled) and "final:FILE".
func checkFailpoint(key string) error {
	parts := strings.Split(key, ":")
	steps := map[string]bool{}
	for _, s := range append(append([]string{}, upgrade.ForwardSteps...), upgrade.RollbackSteps...) {
		steps[s] = true
	}
	switch {
	case len(parts) == 1:
		switch key {
		case upgrade.EvBegin, upgrade.EvRollbackBegin, upgrade.EvEnd, upgrade.EvJournalRepaired, upgrade.EvRollbackRetry:
			return nil
		}
	case len(parts) == 2 && parts[0] == "final":
		switch parts[1] {
		case upgrade.FinalFile, evidence.ManifestFile:
			return nil
		}
	case len(parts) == 3:
		switch parts[0] {
		case upgrade.EvStepStart, upgrade.EvStepDone, upgrade.EvStepFailed, "ran":
			if failpointComponent.MatchString(parts[1]) && steps[parts[2]] {
				return nil
			}
		}
	}
	return fmt.Errorf("unknown failpoint %q (want begin, rollback-begin, end, journal-repaired, rollback-retry, step-start|step-done|step-failed|ran:COMPONENT:STEP, or final:%s|%s)",
		key, upgrade.FinalFile, evidence.ManifestFile)
}

func fakeMapCmd() *cobra.Command {
	root := &cobra.Command{Use: "fake-map", Hidden: true, Short: "test-only: act on the file-backed fake map store"}
	var stateFile string
	root.PersistentFlags().StringVar(&stateFile, "state", os.Getenv("FLUXVM_UPGRADE_TEST_FAKE_BPF"), "fake store file")
	open := func() (*bpfmap.Fake, error) {
		if stateFile == "" {
			return nil, fmt.Errorf("fake-map: --state or FLUXVM_UPGRADE_TEST_FAKE_BPF required")
		}
		return bpfmap.NewFakeFile(stateFile)
	}
	var abi bpfmap.ABI
	create := &cobra.Command{
		Use:  "create PIN",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			return f.Create(args[0], abi)
		},
	}
	create.Flags().StringVar(&abi.Type, "type", "Hash", "map type")
	create.Flags().Uint32Var(&abi.KeySize, "key-size", 4, "key size")
	create.Flags().Uint32Var(&abi.ValueSize, "value-size", 8, "value size")
	create.Flags().Uint32Var(&abi.MaxEntries, "max-entries", 1024, "max entries")
	put := &cobra.Command{
		Use:  "put PIN KEYHEX VALUEHEX",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			k, err := hex.DecodeString(args[1])
			if err != nil {
				return err
			}
			v, err := hex.DecodeString(args[2])
			if err != nil {
				return err
			}
			return f.Put(args[0], k, v)
		},
	}
	dump := &cobra.Command{
		Use:  "dump PIN",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			m, ok := f.Map(args[0])
			if !ok {
				return fmt.Errorf("no map at %s", args[0])
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(m)
		},
	}
	root.AddCommand(create, put, dump)
	return root
}
