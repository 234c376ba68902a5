// Package logging builds tpdeploy's zap loggers and bridges them into the Temporal SDK,
// so the SDK's own messages come out in the same structured stream.
package logging

import (
	"fmt"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a JSON (production) or console (development) logger at level.
func New(level string, console bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	cfg := zap.NewProductionConfig()
	if console {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

// Temporal adapts a zap logger to the SDK's key-value logger.
func Temporal(z *zap.Logger) log.Logger {
	return temporalLogger{z.WithOptions(zap.AddCallerSkip(1)).Sugar()}
}

type temporalLogger struct{ s *zap.SugaredLogger }

func (l temporalLogger) Debug(msg string, kv ...any) { l.s.Debugw(msg, kv...) }
func (l temporalLogger) Info(msg string, kv ...any)  { l.s.Infow(msg, kv...) }
func (l temporalLogger) Warn(msg string, kv ...any)  { l.s.Warnw(msg, kv...) }
func (l temporalLogger) Error(msg string, kv ...any) { l.s.Errorw(msg, kv...) }

// With returns a logger that adds kv to every message (log.WithLogger).
func (l temporalLogger) With(kv ...any) log.Logger { return temporalLogger{l.s.With(kv...)} }

var _ log.WithLogger = temporalLogger{}
