package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the whole iot-portal on this machine (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("starter demo is not built yet: it arrives with the iot-portal reference deployment")
		},
	}
}
