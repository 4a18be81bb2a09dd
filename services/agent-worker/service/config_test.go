package service_test

import (
	"strings"
	"testing"

	"github.com/openrath/rath/services/agent-worker/service"
)

func TestConfigValidate(t *testing.T) {
	if err := service.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cfg := service.DefaultConfig()
	cfg.States.MaxBytes, cfg.ContextBytes = -1, -1
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "state cache") || !strings.Contains(err.Error(), "context cache") {
		t.Fatalf("negative sizes: %v, want both reported", err)
	}
}
