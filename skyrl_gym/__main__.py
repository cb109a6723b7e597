from skyrl_gym.cli import main

main()
