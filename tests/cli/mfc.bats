#!/usr/bin/env bats
# mfc.bats: the mfc command's global behaviour: help, version, exit codes.

load helpers

@test "mfc --version prints the version" {
    run "$MFC" --version
    [ "$status" -eq 0 ]
    [[ "$output" =~ ^mfc\ [0-9]+\.[0-9]+\.[0-9]+ ]]
}

@test "mfc with no command prints usage and exits 2" {
    run "$MFC"
    [ "$status" -eq 2 ]
    [[ "$output" == *"Usage: mfc"* ]]
}

@test "an unknown command is a usage error naming it" {
    run "$MFC" frobnicate
    [ "$status" -eq 2 ]
    [[ "$output" == *"unknown command 'frobnicate'"* ]]
}

@test "mfc help lists the commands" {
    run "$MFC" help
    [ "$status" -eq 0 ]
    [[ "$output" == *"version"* ]]
}
