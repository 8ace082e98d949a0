package main

import (
	"encoding"
	"io"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"

	"tsubame/internal/config"
)

// printConfig writes the effective configuration as YAML under the same key
// names the file uses. Fields tagged secret:"true" are redacted.
func printConfig(w io.Writer, cfg *config.Config) error {
	out, err := yaml.Marshal(toYAML(reflect.ValueOf(cfg.Resolved())))
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

func toYAML(v reflect.Value) any {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok && v.Kind() != reflect.Struct {
		text, _ := m.MarshalText()
		return string(text)
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key := f.Tag.Get("koanf")
			if key == "" {
				continue
			}
			if f.Tag.Get("secret") == "true" && !v.Field(i).IsZero() {
				out[key] = "(redacted)"
				continue
			}
			out[key] = toYAML(v.Field(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[k.String()] = toYAML(v.MapIndex(k))
		}
		return out
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = toYAML(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
