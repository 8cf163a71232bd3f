// Package config holds ILB's typed configuration: the world ILB routes in
// (regions, the network between them, sources, models, engine clusters and
// their profiles) and the settings of its components.
//
// A configuration is read with [Load] or [Parse]: YAML is decoded strictly
// (an unknown field is an error that names its line), defaults are applied
// for every omitted setting, and [Config.Validate] reports every problem at
// once, each naming the field path and the bad value. A *Config that passed
// Validate is treated as immutable by every consumer.
package config
