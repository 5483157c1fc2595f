package main

import (
	"context"

	"github.com/omnisat/omnisat/agent/control"
)

func runCtl(ctx context.Context, env *cliEnv, args []string) int {
	return control.CLI{
		Name: "omnisat ctl", Stdout: env.stdout, Stderr: env.stderr, Getenv: env.getenv,
		SocketFromConfig: func(path string) (string, error) {
			cfg, err := loadConfig(path, loadOptions{simulator: true, getenv: env.getenv})
			if err != nil {
				return "", err
			}
			return cfg.socketPath(), nil
		},
	}.Run(ctx, args)
}
