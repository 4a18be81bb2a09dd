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

// Every malformed allowed endpoint is reported, naming the flag.
func TestConfigValidateAllowedEndpoints(t *testing.T) {
	cfg := service.DefaultConfig()
	cfg.AllowBaseURLs = []string{"openai=http://127.0.0.1:8080/v1", "anthropic=https://llm.example.com/"}
	cfg.AllowLoopback = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid endpoints: %v", err)
	}
	cfg.AllowBaseURLs = []string{"http://127.0.0.1:8080/v1", "gemini=https://llm.example.com", "openai=https://u:secret@llm.example.com"}
	err := cfg.Validate()
	for _, want := range []string{"--allow-base-url: endpoint \"http://127.0.0.1:8080/v1\": want PROVIDER=URL", "provider must be openai or anthropic", "user information"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "secret") {
		t.Errorf("the error shows a password: %v", err)
	}
}
